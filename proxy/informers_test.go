package proxy

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestFirstSyncSeesEveryService: the first sync after start holds every
// Service the API has, not the part of the initial list the handlers had
// been given when the informers' caches reported synced. A partial first
// sync drops the rest's rules until the next sync (and a mode switch
// removes the old mode's rules right after it).
func TestFirstSyncSeesEveryService(t *testing.T) {
	const n = 3000
	objs := make([]runtime.Object, 0, 2*n)
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs, service("a", name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)),
			slice("a", name, name+"-1", 8080, fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)))
	}
	client := fake.NewClientset(objs...)
	p, rp := newTestProxy(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, client) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rp.mu.Lock()
		synced := len(rp.snaps) > 0
		rp.mu.Unlock()
		if synced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no sync within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rp.mu.Lock()
	first := rp.snaps[0]
	rp.mu.Unlock()
	if len(first.Services) != n {
		t.Fatalf("first sync had %d of %d services", len(first.Services), n)
	}
	ready := 0
	for _, s := range first.Services {
		if len(s.Selected.Cluster) == 1 {
			ready++
		}
	}
	if ready != n {
		t.Errorf("first sync had endpoints for %d of %d services", ready, n)
	}
}

// TestStripUnusedKeepsWhatTheProxyReads: the informers' transform drops
// managed fields, selectors, target references and foreign annotations and
// labels, and the service ports and endpoints built from the stripped
// objects are the same as from the originals.
func TestStripUnusedKeepsWhatTheProxyReads(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	svc := service("a", "web", "10.96.0.1")
	svc.ManagedFields = mf
	svc.Spec.Selector = map[string]string{"app": "web"}
	svc.Annotations = map[string]string{SchedulerAnnotation: "lc", "kubectl.kubernetes.io/last-applied-configuration": "{…}"}
	sl := slice("a", "web", "web-1", 8080, "10.244.0.1", "10.244.0.2")
	sl.ManagedFields = mf
	sl.Labels["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io"
	sl.Annotations = map[string]string{TriggerTimeAnnotation: "2026-12-02T05:00:00Z", "other": "x"}
	for i := range sl.Endpoints {
		sl.Endpoints[i].TargetRef = &v1.ObjectReference{Kind: "Pod", Namespace: "a", Name: fmt.Sprintf("web-%d", i)}
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: mf, Labels: map[string]string{ZoneLabel: "z1"}},
		Status: v1.NodeStatus{Images: []v1.ContainerImage{{Names: []string{"img"}}}}}

	build := func(svc *v1.Service, sl *discovery.EndpointSlice) []*ServicePort {
		t.Helper()
		sps, errs := ServicePortsFor(svc, IPv4)
		errs = append(errs, EndpointsFor(sps, []*discovery.EndpointSlice{sl}, IPv4, "n1")...)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return sps
	}
	want := build(svc.DeepCopy(), sl.DeepCopy())
	for _, o := range []any{svc, sl, node, "not an object"} {
		if got, err := StripUnused(o); err != nil || got != o {
			t.Fatalf("StripUnused(%T) = %v, %v; want the same object", o, got, err)
		}
	}
	if svc.ManagedFields != nil || svc.Spec.Selector != nil || len(svc.Annotations) != 1 || svc.Annotations[SchedulerAnnotation] != "lc" {
		t.Errorf("service after strip: managedFields %v, selector %v, annotations %v", svc.ManagedFields, svc.Spec.Selector, svc.Annotations)
	}
	if sl.ManagedFields != nil || len(sl.Labels) != 1 || sl.Labels[ServiceNameLabel] != "web" ||
		len(sl.Annotations) != 1 || sl.Annotations[TriggerTimeAnnotation] == "" || sl.Endpoints[0].TargetRef != nil {
		t.Errorf("slice after strip: labels %v, annotations %v, targetRef %v", sl.Labels, sl.Annotations, sl.Endpoints[0].TargetRef)
	}
	if node.ManagedFields != nil || node.Status.Images != nil || node.Labels[ZoneLabel] != "z1" {
		t.Errorf("node after strip: %+v", node)
	}
	if got := build(svc, sl); !reflect.DeepEqual(got, want) {
		t.Errorf("service ports from stripped objects differ:\n got %+v\nwant %+v", got, want)
	}
}
