package apiserver_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodenet/nodenet/internal/nettest"
)

func TestNamespaceDeletionEmptiesIt(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	const ns = "doomed"
	createNamespace(t, ts, ns)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	pod := func(name, node string, grace *int64) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: grace, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	_, err := c.CoreV1().Pods(ns).Create(ctx, pod("unbound", "", nil), metav1.CreateOptions{})
	must("pod unbound", err)
	for _, name := range []string{"running", "graceful", "slow"} {
		grace := int64(30)
		if name == "slow" {
			grace = 3600
		}
		p, err := c.CoreV1().Pods(ns).Create(ctx, pod(name, "node-x", &grace), metav1.CreateOptions{})
		must("pod "+name, err)
		p.Status.Phase = corev1.PodRunning
		_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		must("pod status "+name, err)
	}
	// One pod is already terminating, waiting for its kubelet.
	must("graceful delete", c.CoreV1().Pods(ns).Delete(ctx, "graceful", metav1.DeleteOptions{}))
	if p, err := c.CoreV1().Pods(ns).Get(ctx, "graceful", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("graceful pod not terminating: %v", err)
	}
	a, err := c.CoreV1().Services(ns).Create(ctx, clusterIPService("svc-a"), metav1.CreateOptions{})
	must("svc-a", err)
	b, err := c.CoreV1().Services(ns).Create(ctx, nodePortService("svc-b"), metav1.CreateOptions{})
	must("svc-b", err)
	for i := 0; i < 3; i++ {
		_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i)}}, metav1.CreateOptions{})
		must("configmap", err)
	}
	for _, svc := range []string{"svc-a", "svc-b"} {
		_, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{GenerateName: svc + "-", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.3.4"}}},
		}, metav1.CreateOptions{})
		must("endpointslice", err)
	}
	_, err = c.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "leader"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("me")}}, metav1.CreateOptions{})
	must("lease", err)
	if keys := etcdKeys(t, ts, "/registry/"); countNamespaced(keys, ns) < 12 {
		t.Fatalf("only %d keys of namespace %s in etcd before the delete", countNamespaced(keys, ns), ns)
	}
	ipsBefore, portsBefore := checkServiceClaims(t, ts)
	for _, ip := range []string{a.Spec.ClusterIP, b.Spec.ClusterIP} {
		if ipsBefore[ip] == "" {
			t.Fatalf("IP %s not claimed before the delete", ip)
		}
	}

	nsObj, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	must("get namespace", err)
	w, err := c.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", ns).String(), ResourceVersion: nsObj.ResourceVersion})
	must("watch namespace", err)
	defer w.Stop()
	start := time.Now()
	must("delete namespace", c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))

	// The namespace is first marked Terminating, then removed.
	sawTerminating, sawDeleted := false, false
	deadline := time.After(10 * time.Second)
	for !sawDeleted {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("namespace watch closed early")
			}
			n, _ := ev.Object.(*corev1.Namespace)
			switch {
			case ev.Type == watch.Modified && n != nil && n.DeletionTimestamp != nil && n.Status.Phase == corev1.NamespaceTerminating:
				sawTerminating = true
			case ev.Type == watch.Deleted:
				sawDeleted = true
			case ev.Type == watch.Error:
				t.Fatalf("namespace watch error: %v", apierrors.FromObject(ev.Object))
			}
		case <-deadline:
			t.Fatalf("namespace not gone 10s after the delete (terminating seen: %v)", sawTerminating)
		}
	}
	if !sawTerminating {
		t.Error("no MODIFIED event showing the namespace Terminating before it went")
	}
	t.Logf("namespace deleted in %v", time.Since(start).Round(time.Millisecond))
	if _, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace after deletion: %v", err)
	}

	// Nothing of it is left: not through the API, not in etcd.
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	must("list pods", err)
	svcs, err := c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	must("list services", err)
	cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	must("list configmaps", err)
	slices, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	must("list endpointslices", err)
	if len(pods.Items)+len(svcs.Items)+len(cms.Items)+len(slices.Items) != 0 {
		t.Errorf("left behind: %d pods, %d services, %d configmaps, %d endpointslices", len(pods.Items), len(svcs.Items), len(cms.Items), len(slices.Items))
	}
	if keys := etcdKeys(t, ts, "/registry/"); countNamespaced(keys, ns) != 0 {
		t.Errorf("%d etcd keys of namespace %s remain", countNamespaced(keys, ns), ns)
	}
	ips, ports := checkServiceClaims(t, ts)
	for _, ip := range []string{a.Spec.ClusterIP, b.Spec.ClusterIP} {
		if owner, ok := ips[ip]; ok {
			t.Errorf("IP %s still claimed by %s", ip, owner)
		}
	}
	if owner, ok := ports[strconv.Itoa(int(b.Spec.Ports[0].NodePort))]; ok {
		t.Errorf("NodePort %d still claimed by %s", b.Spec.Ports[0].NodePort, owner)
	}
	if len(ips) != len(ipsBefore)-2 || len(ports) != len(portsBefore)-1 {
		t.Errorf("claims: %d IPs / %d ports before, %d / %d after", len(ipsBefore), len(portsBefore), len(ips), len(ports))
	}

	// The name is free again, and the new namespace starts empty.
	createNamespace(t, ts, ns)
	if cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil || len(cms.Items) != 0 {
		t.Errorf("recreated namespace: %v, %d configmaps", err, len(cms.Items))
	}
	_, err = c.CoreV1().Services(ns).Create(ctx, clusterIPService("svc-a"), metav1.CreateOptions{})
	must("service in the recreated namespace", err)
}

// TestNamespaceDeletionRacingCreates deletes namespaces while clients keep
// creating objects in them: every create is either refused or removed with
// the namespace — nothing may outlive it.
func TestNamespaceDeletionRacingCreates(t *testing.T) {
	nettest.SkipShort(t, "a race stress test")
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	for round := 0; round < 4; round++ {
		ns := "racing-" + strconv.Itoa(round)
		createNamespace(t, ts, ns)
		var wg sync.WaitGroup
		var created atomic.Int64
		stop := make(chan struct{})
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					// Pods: the namespace finalizer empties them first, so a
					// pod slipping in late is the most likely to be missed.
					name := fmt.Sprintf("pod-%d-%d", g, i)
					pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
					_, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
					switch {
					case err == nil:
						created.Add(1)
					case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
					default:
						t.Errorf("create %s: %v", name, err)
						return
					}
				}
			}()
		}
		waitFor(t, 10*time.Second, "some creates", func() bool { return created.Load() > 20 })
		delStart := time.Now()
		if err := c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "namespace "+ns+" to go", func() bool {
			_, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
		t.Logf("round %d: %d creates, namespace gone %v after the delete", round, created.Load(), time.Since(delStart).Round(time.Millisecond))
		time.Sleep(100 * time.Millisecond)
		close(stop)
		wg.Wait()
		if n := countNamespaced(etcdKeys(t, ts, "/registry/"), ns); n != 0 {
			t.Fatalf("round %d: %d objects outlived namespace %s (%d creates succeeded)", round, n, ns, created.Load())
		}
	}
}

// countNamespaced counts etcd keys (under /registry/) of objects in ns.
func countNamespaced(keys map[string]string, ns string) int {
	n := 0
	for k, v := range keys {
		if strings.Contains("/"+k, "/"+ns+"/") || strings.HasPrefix(v, ns+"/") && strings.HasPrefix(k, "ranges/") {
			n++
		}
	}
	return n
}
