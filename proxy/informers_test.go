package proxy

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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
	// A LoadBalancer with every field the proxy reads set, lists with the
	// slack the JSON decoder leaves.
	svc := service("a", "web", "10.96.0.1",
		v1.ServicePort{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt(8080), NodePort: 30080, AppProtocol: ptr("http")},
		v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, TargetPort: intstr.FromString("dns"), NodePort: 30053})
	svc.Spec.Ports = slices.Grow(svc.Spec.Ports, 2)
	svc.Spec.Type = v1.ServiceTypeLoadBalancer
	svc.Spec.ClusterIPs = append(slices.Grow([]string{"10.96.0.1"}, 3), "fd00::1")
	svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	svc.Spec.IPFamilyPolicy = ptr(v1.IPFamilyPolicyPreferDualStack)
	svc.Spec.ExternalIPs = []string{"192.0.2.1"}
	svc.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyCluster)
	svc.Spec.HealthCheckNodePort = 31000
	svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(int32(600))}}
	svc.Spec.TrafficDistribution = ptr("PreferClose")
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.9"}}
	svc.Labels = map[string]string{"app": "web"}
	svc.ManagedFields = mf
	svc.Spec.Selector = map[string]string{"app": "web"}
	svc.Annotations = map[string]string{SchedulerAnnotation: "lc", "kubectl.kubernetes.io/last-applied-configuration": "{…}"}
	sl := slice("a", "web", "web-1", 8080, "10.244.0.1", "10.244.0.2")
	sl.ManagedFields = mf
	sl.Labels["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io"
	sl.Annotations = map[string]string{TriggerTimeAnnotation: "2026-12-02T05:00:00Z", "other": "x"}
	for i := range sl.Endpoints {
		sl.Endpoints[i].TargetRef = &v1.ObjectReference{Kind: "Pod", Namespace: "a", Name: fmt.Sprintf("web-%d", i)}
		sl.Endpoints[i].Conditions = discovery.EndpointConditions{Ready: ptr(i == 0), Serving: ptr(true), Terminating: ptr(i != 0)}
		sl.Endpoints[i].Zone = ptr("z1")
		sl.Endpoints[i].Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "z1"}}}
	}
	sl.Endpoints = slices.Grow(sl.Endpoints, 3)
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
	// Compacted: lists exactly sized, one shared copy of each value.
	if cap(svc.Spec.Ports) != 2 || cap(svc.Spec.ClusterIPs) != 2 || cap(sl.Endpoints) != 2 {
		t.Errorf("capacities after strip: ports %d, clusterIPs %d, endpoints %d; want the lengths", cap(svc.Spec.Ports), cap(svc.Spec.ClusterIPs), cap(sl.Endpoints))
	}
	other := slice("b", "db", "db-1", 8080, "10.244.0.3")
	other.Endpoints[0].Conditions.Serving = ptr(true)
	if _, err := StripUnused(other); err != nil {
		t.Fatal(err)
	}
	e0, e1, o := sl.Endpoints[0], sl.Endpoints[1], other.Endpoints[0]
	if e0.Conditions.Serving != e1.Conditions.Serving || e1.Conditions.Serving != o.Conditions.Serving ||
		e0.NodeName != o.NodeName || sl.Ports[0].Port != other.Ports[0].Port || sl.Ports[0].Protocol != other.Ports[0].Protocol {
		t.Error("equal values of two EndpointSlices are not one shared pointer after strip")
	}
	if e0.Conditions.Ready == e1.Conditions.Ready || !*e0.Conditions.Ready || *e1.Conditions.Ready || !*e1.Conditions.Terminating {
		t.Errorf("different values shared: ready %v/%v", *e0.Conditions.Ready, *e1.Conditions.Ready)
	}
}

// TestSharedTableBounded: past maxShared distinct values a table stops
// growing and hands back the caller's own pointer.
func TestSharedTableBounded(t *testing.T) {
	var s shared[int]
	for i := range maxShared + 10 {
		v := i
		s.ptr(&v)
	}
	if n := s.n.Load(); n != maxShared {
		t.Fatalf("table holds %d values, want %d", n, maxShared)
	}
	v := maxShared + 5
	if p := s.ptr(&v); p != &v {
		t.Error("a full table returned another pointer for a new value")
	}
	first := 0
	if p := s.ptr(&first); p == &first || *p != 0 {
		t.Error("a value stored before the table filled is no longer shared")
	}
}

func ptr[T any](v T) *T { return &v }

// preparingPlane is a recordingPlane with start-up work (Preparer).
type preparingPlane struct {
	recordingPlane
	failing  error
	prepared int
	called   chan struct{} // closed by the first Prepare
	// syncedBeforePrepare: a Sync came before Prepare was called.
	syncedBeforePrepare bool
}

func (r *preparingPlane) Prepare(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prepared++
	r.syncedBeforePrepare = len(r.syncs) > 0
	if r.prepared == 1 {
		close(r.called)
	}
	return r.failing
}

// TestRunPreparesTheDataPlane: Run calls Prepare once, before the first
// sync (it runs beside the initial lists); a failed Prepare does not stop
// the proxy, whose first sync does the work itself.
func TestRunPreparesTheDataPlane(t *testing.T) {
	for _, failing := range []error{nil, fmt.Errorf("verifier said no")} {
		t.Run(fmt.Sprint("failing=", failing != nil), func(t *testing.T) {
			rp := &preparingPlane{failing: failing, called: make(chan struct{})}
			// Prepare runs while the informers list: the Services list
			// answers only once it has been called.
			client := fake.NewClientset(service("a", "web", "10.96.0.1"))
			client.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
				select {
				case <-rp.called:
				case <-time.After(30 * time.Second):
				}
				return false, nil, nil
			})
			p, err := New(Config{}, map[Family]DataPlane{IPv4: rp})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx, client) }()
			select {
			case <-p.Synced():
			case <-time.After(30 * time.Second):
				t.Fatal("no sync within 30s")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("run: %v", err)
			}
			rp.mu.Lock()
			defer rp.mu.Unlock()
			if rp.prepared != 1 {
				t.Errorf("Prepare called %d times, want 1", rp.prepared)
			}
			if rp.syncedBeforePrepare {
				t.Error("the first sync ran before Prepare was called")
			}
			if len(rp.snaps) == 0 || len(rp.snaps[0].Services) != 1 {
				t.Errorf("first sync after Prepare: %d syncs", len(rp.snaps))
			}
		})
	}
}
