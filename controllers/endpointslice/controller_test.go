package endpointslice

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/testapi"
)

func TestNewValidatesOptions(t *testing.T) {
	s := testapi.Start(t)
	factory := informers.NewSharedInformerFactory(s.Client, 0)
	for _, n := range []int{-1, 1001} {
		if err := (Options{MaxEndpointsPerSlice: n}).Validate(); err == nil || !strings.Contains(err.Error(), "--max-endpoints-per-slice") {
			t.Errorf("MaxEndpointsPerSlice=%d: Validate err %v, want one naming --max-endpoints-per-slice", n, err)
		}
		_, err := New(s.Client, factory, Options{MaxEndpointsPerSlice: n}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "--max-endpoints-per-slice") {
			t.Errorf("MaxEndpointsPerSlice=%d: err %v, want one naming --max-endpoints-per-slice", n, err)
		}
	}
	for n, want := range map[int]int{0: DefaultMaxEndpointsPerSlice, 1: 1, 1000: 1000} {
		c, err := New(s.Client, informers.NewSharedInformerFactory(s.Client, 0), Options{MaxEndpointsPerSlice: n}, nil, nil)
		if err != nil {
			t.Fatalf("MaxEndpointsPerSlice=%d: %v", n, err)
		}
		if c.opts.MaxEndpointsPerSlice != want {
			t.Errorf("MaxEndpointsPerSlice=%d: effective %d, want %d", n, c.opts.MaxEndpointsPerSlice, want)
		}
	}
	if _, err := New(nil, factory, Options{}, nil, nil); err == nil {
		t.Error("nil client accepted")
	}
}

// TestPodLifecycle follows one pod from creation to deletion.
func TestPodLifecycle(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	ctl := startController(t, cl, Options{})
	createNode(t, cl, "node-a", "zone-1")
	svc := createService(t, cl, selectorService("web", "web", intstr.FromInt32(8080)))
	createService(t, cl, selectorService("barrier", "barrier", intstr.FromInt32(8080)))
	ctl.idle(t, testNS+"/web")
	ctl.idle(t, testNS+"/barrier")

	// A pod without an IP queues nothing, so there is no sync of web to
	// wait for. A pod informer delivers events in order: once the barrier
	// pod created after it has been handled, so has web-1.
	mark := ctl.q.Mark()
	createPod(t, cl, podSpec{name: "web-1", app: "web", node: "node-a"})
	createPod(t, cl, podSpec{name: "barrier-1", app: "barrier", node: "node-a", ips: []string{"10.244.1.99"}})
	ctl.handled(t, testNS+"/barrier", mark)
	ctl.idle(t, testNS+"/web")
	if ss := listSlices(t, cl, "web"); len(ss) != 0 {
		t.Fatalf("pod without IP got listed:\n%s", dumpSlices(ss))
	}

	pod, err := cl.CoreV1().Pods(testNS).Get(ctxT(t), "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setPodStatus(ctxT(t), cl, pod, []string{"10.244.1.5"}, false); err != nil {
		t.Fatal(err)
	}
	cond := func(ready, serving, terminating bool) func([]discoveryv1.EndpointSlice) bool {
		return func(ss []discoveryv1.EndpointSlice) bool {
			if len(ss) != 1 || len(ss[0].Endpoints) != 1 {
				return false
			}
			c := ss[0].Endpoints[0].Conditions
			return deref(c.Ready) == ready && deref(c.Serving) == serving && deref(c.Terminating) == terminating
		}
	}
	ss := waitSlices(t, cl, "web", "not-ready endpoint", cond(false, false, false))

	sl := ss[0]
	if !strings.HasPrefix(sl.Name, "web-") || sl.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("slice %s type %s, want generated from web- and IPv4", sl.Name, sl.AddressType)
	}
	if len(sl.OwnerReferences) != 1 || sl.OwnerReferences[0].UID != svc.UID || !deref(sl.OwnerReferences[0].Controller) || !deref(sl.OwnerReferences[0].BlockOwnerDeletion) {
		t.Errorf("ownerReferences %+v, want the Service as controller", sl.OwnerReferences)
	}
	if len(sl.Ports) != 1 || deref(sl.Ports[0].Name) != "http" || deref(sl.Ports[0].Port) != 8080 || deref(sl.Ports[0].Protocol) != corev1.ProtocolTCP {
		t.Errorf("ports %s, want http/TCP/8080", portsKey(sl.Ports))
	}
	ep := sl.Endpoints[0]
	if len(ep.Addresses) != 1 || ep.Addresses[0] != "10.244.1.5" || deref(ep.NodeName) != "node-a" || deref(ep.Zone) != "zone-1" ||
		ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" || ep.TargetRef.Name != "web-1" || ep.TargetRef.UID != pod.UID {
		t.Errorf("endpoint %+v", ep)
	}
	if ts := sl.Annotations[corev1.EndpointsLastChangeTriggerTime]; ts == "" {
		t.Error("no last-change-trigger-time annotation")
	} else if at, err := time.Parse(time.RFC3339Nano, ts); err != nil || time.Since(at) > time.Minute || time.Until(at) > time.Second {
		t.Errorf("implausible trigger time %q (%v)", ts, err)
	}

	setReady(t, cl, "web-1", true)
	waitSlices(t, cl, "web", "ready endpoint", cond(true, true, false))

	// The default grace period only marks a scheduled pod terminating.
	deletePod(t, cl, "web-1", nil)
	waitSlices(t, cl, "web", "terminating endpoint", cond(false, true, true))

	deletePod(t, cl, "web-1", ptr[int64](0))
	waitSlices(t, cl, "web", "endpoint gone", func(ss []discoveryv1.EndpointSlice) bool { return totalEndpoints(ss) == 0 })
}

// TestTerminalAndIPLessPodsExcluded: finished pods and pods without an IP
// are not endpoints; publishNotReadyAddresses lists unready ones as ready.
func TestPodFilters(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	startController(t, cl, Options{})
	createService(t, cl, selectorService("web", "web", intstr.FromInt32(8080)))
	pnr := selectorService("pnr", "web", intstr.FromInt32(8080))
	pnr.Spec.PublishNotReadyAddresses = true
	createService(t, cl, pnr)

	createPod(t, cl, podSpec{name: "ready", app: "web", ips: []string{"10.244.0.2"}, ready: true})
	createPod(t, cl, podSpec{name: "unready", app: "web", ips: []string{"10.244.0.3"}})
	createPod(t, cl, podSpec{name: "no-ip", app: "web"})
	done := createPod(t, cl, podSpec{name: "done", app: "web", ips: []string{"10.244.0.4"}, ready: true})
	createPod(t, cl, podSpec{name: "other", app: "other", ips: []string{"10.244.0.5"}, ready: true})
	waitSlices(t, cl, "web", "3 endpoints", func(ss []discoveryv1.EndpointSlice) bool { return totalEndpoints(ss) == 3 })

	done.Status.Phase = corev1.PodSucceeded
	if _, err := cl.CoreV1().Pods(testNS).UpdateStatus(ctxT(t), done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ss := waitSlices(t, cl, "web", "finished pod gone", func(ss []discoveryv1.EndpointSlice) bool { return totalEndpoints(ss) == 2 })
	eps := endpointsByPod(t, ss)
	if !deref(eps["ready"].Conditions.Ready) || deref(eps["unready"].Conditions.Ready) || deref(eps["unready"].Conditions.Serving) {
		t.Errorf("conditions wrong:\n%s", dumpSlices(ss))
	}

	ss = waitSlices(t, cl, "pnr", "publishNotReadyAddresses endpoints", func(ss []discoveryv1.EndpointSlice) bool { return totalEndpoints(ss) == 2 })
	for name, ep := range endpointsByPod(t, ss) {
		if !deref(ep.Conditions.Ready) || !deref(ep.Conditions.Serving) {
			t.Errorf("publishNotReadyAddresses: %s not ready+serving:\n%s", name, dumpSlices(ss))
		}
	}
}

// TestNamedPortsPerPod: a named targetPort resolves in each pod, and pods
// that resolve it differently (or not at all) get separate slices.
func TestNamedPortsPerPod(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	startController(t, cl, Options{})
	svc := selectorService("web", "web", intstr.FromString("web"))
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: 9100, TargetPort: intstr.FromInt32(9100), Protocol: corev1.ProtocolTCP, Name: "metrics", AppProtocol: ptr("http")})
	createService(t, cl, svc)

	createPod(t, cl, podSpec{name: "a", app: "web", ips: []string{"10.244.0.2"}, ready: true,
		ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}})
	createPod(t, cl, podSpec{name: "b", app: "web", ips: []string{"10.244.0.3"}, ready: true,
		ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}})
	createPod(t, cl, podSpec{name: "c", app: "web", ips: []string{"10.244.0.4"}, ready: true,
		ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolUDP}}})

	ss := waitSlices(t, cl, "web", "3 slices", func(ss []discoveryv1.EndpointSlice) bool {
		return len(ss) == 3 && totalEndpoints(ss) == 3
	})
	got := map[string]string{}
	for _, sl := range ss {
		if len(sl.Endpoints) != 1 {
			t.Fatalf("slice %s has %d endpoints", sl.Name, len(sl.Endpoints))
		}
		got[sl.Endpoints[0].TargetRef.Name] = portsKey(sl.Ports)
	}
	want := map[string]string{
		"a": "http/TCP/8080/,metrics/TCP/9100/http,",
		"b": "http/TCP/9090/,metrics/TCP/9100/http,",
		"c": "metrics/TCP/9100/http,", // "web" is UDP in c: does not resolve for TCP
	}
	for pod, w := range want {
		if got[pod] != w {
			t.Errorf("pod %s: ports %q, want %q", pod, got[pod], w)
		}
	}

	// A second pod with a's ports joins a's slice.
	createPod(t, cl, podSpec{name: "a2", app: "web", ips: []string{"10.244.0.5"}, ready: true,
		ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}}})
	waitSlices(t, cl, "web", "a2 with a", func(ss []discoveryv1.EndpointSlice) bool {
		if len(ss) != 3 {
			return false
		}
		for _, sl := range ss {
			if len(sl.Endpoints) == 2 {
				return portsKey(sl.Ports) == want["a"]
			}
		}
		return false
	})
}

// TestSplitChurnAndRestart: 250 pods fill 3 slices of at most 100; a single
// pod change rewrites exactly one slice; a restarted controller rewrites
// nothing.
func TestSplitChurnAndRestart(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	ctl := startController(t, cl, Options{})
	createNode(t, cl, "node-a", "zone-1")
	createService(t, cl, selectorService("big", "big", intstr.FromInt32(8080)))
	const n = 250
	var specs []podSpec
	for i := range n {
		specs = append(specs, podSpec{name: fmt.Sprintf("big-%03d", i), app: "big", node: "node-a", ips: []string{podIP(i)}, ready: true})
	}
	createPods(t, cl, specs)

	ss := waitSlices(t, cl, "big", "250 ready endpoints", func(ss []discoveryv1.EndpointSlice) bool {
		if totalEndpoints(ss) != n {
			return false
		}
		for _, ep := range endpointsByPod(t, ss) {
			if !deref(ep.Conditions.Ready) {
				return false
			}
		}
		return true
	})
	if len(ss) != 3 {
		t.Fatalf("%d slices, want 3:\n%s", len(ss), dumpSlices(ss))
	}
	for _, sl := range ss {
		if len(sl.Endpoints) > 100 {
			t.Errorf("slice %s has %d endpoints, max 100", sl.Name, len(sl.Endpoints))
		}
	}
	ctl.idle(t, testNS+"/big")
	before := resourceVersions(listSlices(t, cl, "big"))

	// One readiness flip: one slice.
	mark := ctl.q.Mark()
	setReady(t, cl, "big-123", false)
	ss = waitSlices(t, cl, "big", "big-123 unready", func(ss []discoveryv1.EndpointSlice) bool {
		ep, ok := endpointsByPod(t, ss)["big-123"]
		return ok && !deref(ep.Conditions.Ready)
	})
	ctl.handled(t, testNS+"/big", mark)
	after := resourceVersions(listSlices(t, cl, "big"))
	if ch := changedSlices(before, after); len(ch) != 1 {
		t.Fatalf("readiness flip changed slices %v, want exactly one:\n%s", ch, dumpSlices(ss))
	}

	// One new pod: one slice (the one with room), no new slice.
	before = after
	mark = ctl.q.Mark()
	createPod(t, cl, podSpec{name: "big-new", app: "big", node: "node-a", ips: []string{podIP(n)}, ready: true})
	ss = waitSlices(t, cl, "big", "big-new listed", func(ss []discoveryv1.EndpointSlice) bool { return totalEndpoints(ss) == n+1 })
	ctl.handled(t, testNS+"/big", mark)
	after = resourceVersions(listSlices(t, cl, "big"))
	if ch := changedSlices(before, after); len(ch) != 1 || len(after) != 3 {
		t.Fatalf("new pod changed slices %v (now %d slices), want one of 3:\n%s", ch, len(after), dumpSlices(ss))
	}

	// One pod gone: one slice.
	before = after
	mark = ctl.q.Mark()
	deletePod(t, cl, "big-007", ptr[int64](0))
	ss = waitSlices(t, cl, "big", "big-007 gone", func(ss []discoveryv1.EndpointSlice) bool { return totalEndpoints(ss) == n })
	ctl.handled(t, testNS+"/big", mark)
	after = resourceVersions(listSlices(t, cl, "big"))
	if ch := changedSlices(before, after); len(ch) != 1 {
		t.Fatalf("pod deletion changed slices %v, want exactly one:\n%s", ch, dumpSlices(ss))
	}

	// An irrelevant pod update (an annotation) changes nothing.
	pod, err := cl.CoreV1().Pods(testNS).Get(ctxT(t), "big-200", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{"note": "irrelevant"}
	if _, err := cl.CoreV1().Pods(testNS).Update(ctxT(t), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Restart: a new instance with the same state writes nothing. It queues
	// every Service when its informers list them; once it has handled big,
	// any rewrite would have happened.
	before = after
	ctl.stop()
	ctl = startController(t, cl, Options{})
	ctl.idle(t, testNS+"/big")
	if ch := changedSlices(before, resourceVersions(listSlices(t, cl, "big"))); len(ch) != 0 {
		t.Fatalf("restarted controller rewrote slices %v", ch)
	}
}

// TestLoweredLimit: a restart with a smaller --max-endpoints-per-slice
// re-packs the slices.
func TestLoweredLimit(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	ctl := startController(t, cl, Options{MaxEndpointsPerSlice: 10})
	createService(t, cl, selectorService("web", "web", intstr.FromInt32(8080)))
	var specs []podSpec
	for i := range 25 {
		specs = append(specs, podSpec{name: fmt.Sprintf("web-%02d", i), app: "web", ips: []string{podIP(i)}, ready: true})
	}
	createPods(t, cl, specs)
	waitSlices(t, cl, "web", "3 slices of 25", func(ss []discoveryv1.EndpointSlice) bool { return len(ss) == 3 && totalEndpoints(ss) == 25 })
	ctl.stop()

	startController(t, cl, Options{MaxEndpointsPerSlice: 4})
	ss := waitSlices(t, cl, "web", "7 slices of ≤4", func(ss []discoveryv1.EndpointSlice) bool {
		if totalEndpoints(ss) != 25 {
			return false
		}
		for _, sl := range ss {
			if len(sl.Endpoints) > 4 {
				return false
			}
		}
		return true
	})
	endpointsByPod(t, ss) // no duplicates
	if len(ss) != 7 {
		t.Errorf("%d slices, want 7:\n%s", len(ss), dumpSlices(ss))
	}
}

// TestSelectorChange: the endpoints follow the Service's selector.
func TestSelectorChange(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	startController(t, cl, Options{})
	svc := createService(t, cl, selectorService("web", "a", intstr.FromInt32(8080)))
	createPod(t, cl, podSpec{name: "a1", app: "a", ips: []string{"10.244.0.2"}, ready: true})
	createPod(t, cl, podSpec{name: "a2", app: "a", ips: []string{"10.244.0.3"}, ready: true})
	createPod(t, cl, podSpec{name: "b1", app: "b", ips: []string{"10.244.0.4"}, ready: true})
	waitSlices(t, cl, "web", "a1 and a2", func(ss []discoveryv1.EndpointSlice) bool {
		eps := endpointsByPod(t, ss)
		_, a1 := eps["a1"]
		_, a2 := eps["a2"]
		return len(eps) == 2 && a1 && a2
	})

	svc.Spec.Selector = map[string]string{"app": "b"}
	if _, err := cl.CoreV1().Services(testNS).Update(ctxT(t), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSlices(t, cl, "web", "b1 only", func(ss []discoveryv1.EndpointSlice) bool {
		eps := endpointsByPod(t, ss)
		_, b1 := eps["b1"]
		return len(eps) == 1 && b1 && len(ss) == 1
	})

	// A pod relabelled into the selector joins.
	a1, err := cl.CoreV1().Pods(testNS).Get(ctxT(t), "a1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a1.Labels["app"] = "b"
	if _, err := cl.CoreV1().Pods(testNS).Update(ctxT(t), a1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSlices(t, cl, "web", "b1 and relabelled a1", func(ss []discoveryv1.EndpointSlice) bool { return totalEndpoints(ss) == 2 })
}

// TestForeignSlicesUntouched: slices not managed by us stay as they are,
// and a selector-less Service gets no slices of ours.
func TestForeignSlicesUntouched(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	createService(t, cl, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: testNS},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	createService(t, cl, selectorService("web", "web", intstr.FromInt32(8080)))
	createPod(t, cl, podSpec{name: "web-1", app: "web", ips: []string{"10.244.0.2"}, ready: true})
	user := func(name, svc string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, Labels: map[string]string{
				discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "staff.example.com"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.10"}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](80)}},
		}
	}
	var rvs []string
	for _, sl := range []*discoveryv1.EndpointSlice{user("external-1", "external"), user("web-manual", "web")} {
		out, err := cl.DiscoveryV1().EndpointSlices(testNS).Create(ctxT(t), sl, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, out.ResourceVersion)
	}

	ctl := startController(t, cl, Options{})
	waitSlices(t, cl, "web", "web's own slice", func(ss []discoveryv1.EndpointSlice) bool { return totalEndpoints(ss) == 1 })
	ctl.idle(t, testNS+"/external")
	ctl.idle(t, testNS+"/web")
	if ss := listSlices(t, cl, "external"); len(ss) != 0 {
		t.Errorf("selector-less Service got managed slices:\n%s", dumpSlices(ss))
	}
	for i, name := range []string{"external-1", "web-manual"} {
		sl, err := cl.DiscoveryV1().EndpointSlices(testNS).Get(ctxT(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("user slice %s: %v", name, err)
		}
		if sl.ResourceVersion != rvs[i] {
			t.Errorf("user slice %s rewritten (rv %s → %s)", name, rvs[i], sl.ResourceVersion)
		}
	}
}

// TestServiceDeletion: a deleted Service's slices go, whether the
// controller sees the deletion or finds the orphans when it starts.
func TestServiceDeletion(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	ctl := startController(t, cl, Options{})
	createService(t, cl, selectorService("one", "web", intstr.FromInt32(8080)))
	createService(t, cl, selectorService("two", "web", intstr.FromInt32(8080)))
	createPod(t, cl, podSpec{name: "web-1", app: "web", ips: []string{"10.244.0.2"}, ready: true})
	for _, svc := range []string{"one", "two"} {
		waitSlices(t, cl, svc, svc+" slices", func(ss []discoveryv1.EndpointSlice) bool { return len(ss) == 1 })
	}

	if err := cl.CoreV1().Services(testNS).Delete(ctxT(t), "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSlices(t, cl, "one", "one's slices deleted", func(ss []discoveryv1.EndpointSlice) bool { return len(ss) == 0 })

	ctl.stop()
	if err := cl.CoreV1().Services(testNS).Delete(ctxT(t), "two", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	startController(t, cl, Options{})
	waitSlices(t, cl, "two", "orphaned slices deleted", func(ss []discoveryv1.EndpointSlice) bool { return len(ss) == 0 })
}

// TestSelectorRemoved: a Service that loses its selector loses our slices.
func TestSelectorRemoved(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	startController(t, cl, Options{})
	svc := createService(t, cl, selectorService("web", "web", intstr.FromInt32(8080)))
	createPod(t, cl, podSpec{name: "web-1", app: "web", ips: []string{"10.244.0.2"}, ready: true})
	waitSlices(t, cl, "web", "slice", func(ss []discoveryv1.EndpointSlice) bool { return len(ss) == 1 })
	svc.Spec.Selector = nil
	if _, err := cl.CoreV1().Services(testNS).Update(ctxT(t), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSlices(t, cl, "web", "slices deleted", func(ss []discoveryv1.EndpointSlice) bool { return len(ss) == 0 })
}

// TestZoneFromNode: endpoint zones follow the node's zone label.
func TestZoneFromNode(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	startController(t, cl, Options{})
	createNode(t, cl, "node-a", "zone-1")
	createService(t, cl, selectorService("web", "web", intstr.FromInt32(8080)))
	createPod(t, cl, podSpec{name: "on-a", app: "web", node: "node-a", ips: []string{"10.244.0.2"}, ready: true})
	createPod(t, cl, podSpec{name: "on-b", app: "web", node: "node-b", ips: []string{"10.244.0.3"}, ready: true})
	zones := func(a, b string) func([]discoveryv1.EndpointSlice) bool {
		return func(ss []discoveryv1.EndpointSlice) bool {
			eps := endpointsByPod(t, ss)
			return len(eps) == 2 && deref(eps["on-a"].Zone) == a && deref(eps["on-b"].Zone) == b
		}
	}
	waitSlices(t, cl, "web", "zone-1 and none", zones("zone-1", ""))

	node, err := cl.CoreV1().Nodes().Get(ctxT(t), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels[corev1.LabelTopologyZone] = "zone-2"
	if _, err := cl.CoreV1().Nodes().Update(ctxT(t), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSlices(t, cl, "web", "zone-2 after relabel", zones("zone-2", ""))

	createNode(t, cl, "node-b", "zone-3")
	waitSlices(t, cl, "web", "zone-3 once node-b exists", zones("zone-2", "zone-3"))
}

// TestDriftRepaired: edits to our slices by others are undone.
func TestDriftRepaired(t *testing.T) {
	s := testapi.Start(t)
	cl := s.Client
	startController(t, cl, Options{})
	createService(t, cl, selectorService("web", "web", intstr.FromInt32(8080)))
	createPod(t, cl, podSpec{name: "web-1", app: "web", ips: []string{"10.244.0.2"}, ready: true})
	createPod(t, cl, podSpec{name: "web-2", app: "web", ips: []string{"10.244.0.3"}, ready: true})
	ss := waitSlices(t, cl, "web", "2 endpoints", func(ss []discoveryv1.EndpointSlice) bool { return totalEndpoints(ss) == 2 })

	sl := ss[0].DeepCopy()
	sl.Endpoints = sl.Endpoints[:1]
	sl.Labels["extra"] = "label"
	if _, err := cl.DiscoveryV1().EndpointSlices(testNS).Update(ctxT(t), sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSlices(t, cl, "web", "endpoint and labels restored", func(ss []discoveryv1.EndpointSlice) bool {
		return len(ss) == 1 && totalEndpoints(ss) == 2 && ss[0].Labels["extra"] == ""
	})

	if err := cl.DiscoveryV1().EndpointSlices(testNS).Delete(ctxT(t), ss[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSlices(t, cl, "web", "slice recreated", func(ss []discoveryv1.EndpointSlice) bool {
		return len(ss) == 1 && totalEndpoints(ss) == 2 && ss[0].Name != sl.Name
	})
}

// TestDualStack: one slice set per family, each from the pod IP of its
// family.
func TestDualStack(t *testing.T) {
	s := testapi.Start(t, func(c *apiserver.Config) {
		c.ServiceClusterIPRanges = cidrlist.MustParse("10.96.0.0/16", "fd00:10:96::/112")
	})
	cl := s.Client
	startController(t, cl, Options{})
	svc := selectorService("web", "web", intstr.FromInt32(8080))
	policy := corev1.IPFamilyPolicyRequireDualStack
	svc.Spec.IPFamilyPolicy = &policy
	createService(t, cl, svc)
	createPod(t, cl, podSpec{name: "dual", app: "web", ips: []string{"10.244.0.2", "fd00:10:244::2"}, ready: true})
	createPod(t, cl, podSpec{name: "v4only", app: "web", ips: []string{"10.244.0.3"}, ready: true})

	ss := waitSlices(t, cl, "web", "IPv4 and IPv6 slices", func(ss []discoveryv1.EndpointSlice) bool {
		return len(ss) == 2 && totalEndpoints(ss) == 3
	})
	for _, sl := range ss {
		var got []string
		for _, ep := range sl.Endpoints {
			got = append(got, ep.TargetRef.Name+"="+ep.Addresses[0])
		}
		want := map[discoveryv1.AddressType]string{
			discoveryv1.AddressTypeIPv4: "dual=10.244.0.2,v4only=10.244.0.3",
			discoveryv1.AddressTypeIPv6: "dual=fd00:10:244::2",
		}[sl.AddressType]
		if strings.Join(got, ",") != want {
			t.Errorf("%s slice: %s, want %s", sl.AddressType, strings.Join(got, ","), want)
		}
	}
}
