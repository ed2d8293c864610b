package endpoints

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/controllers/internal/queueprobe"
	"github.com/nodenet/nodenet/internal/testapi"
)

const (
	ns       = "default"
	waitLong = 30 * time.Second
)

// running is one controller instance; q tells when it has handled a
// Service's key (see queueprobe), for the checks that nothing was written.
type running struct {
	stop func()
	q    *queueprobe.Queue
}

func run(t *testing.T, client kubernetes.Interface) running {
	var r running
	r.stop = testapi.RunController(t, client, ControllerName, 2, func(f informers.SharedInformerFactory, rec record.EventRecorder) (testapi.Runner, error) {
		c, err := New(client, f, rec, testapi.Logger())
		if err == nil {
			r.q = queueprobe.Wrap(c.queue)
			c.queue = r.q
		}
		return c, err
	})
	return r
}

func ptr[T any](v T) *T { return &v }

func service(name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
}

type ep struct {
	ip                  string
	ready, terminating  bool
	readyUnknown        bool
	node, host, podName string
}

// slice builds an EndpointSlice of svc as the EndpointSlice controller
// would write it.
func slice(svc, name string, family discoveryv1.AddressType, port int32, trigger time.Time, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	if !trigger.IsZero() {
		s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger.UTC().Format(time.RFC3339Nano)}
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Terminating: ptr(e.terminating)}}
		if !e.readyUnknown {
			x.Conditions.Ready = ptr(e.ready)
		}
		if e.node != "" {
			x.NodeName = ptr(e.node)
		}
		if e.host != "" {
			x.Hostname = ptr(e.host)
		}
		if e.podName != "" {
			x.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.podName, UID: types.UID("uid-" + e.podName)}
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func mustCreate[T any](t *testing.T, what string, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T) T {
	t.Helper()
	out, err := create(testapi.Context(t), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
	return out
}

// waitEndpoints polls the Endpoints named name until cond holds.
func waitEndpoints(t *testing.T, c kubernetes.Interface, name, what string, cond func(*corev1.Endpoints) bool) *corev1.Endpoints {
	t.Helper()
	var last *corev1.Endpoints
	var lastErr error
	deadline := time.Now().Add(waitLong)
	for time.Now().Before(deadline) {
		last, lastErr = c.CoreV1().Endpoints(ns).Get(testapi.Context(t), name, metav1.GetOptions{})
		if lastErr != nil {
			last = nil
		}
		if cond(last) {
			return last
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s: endpoints %+v, err %v", what, last, lastErr)
	return nil
}

func ips(a []corev1.EndpointAddress) []string {
	var out []string
	for _, x := range a {
		out = append(out, x.IP)
	}
	return out
}

// TestMirrorsEndpointSlices: Endpoints list the ready and not-ready
// endpoints of the Service's primary-family slices, with ports, labels and
// trigger time, and a second sync writes nothing.
func TestMirrorsEndpointSlices(t *testing.T) {
	s := testapi.Start(t)
	c := s.Client
	ctl := run(t, c)
	svc := mustCreate(t, "service", c.CoreV1().Services(ns).Create, service("web", map[string]string{"app": "web"}))

	// A Service without slices yet has Endpoints without subsets.
	waitEndpoints(t, c, "web", "empty endpoints", func(e *corev1.Endpoints) bool { return e != nil && len(e.Subsets) == 0 })

	t1 := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	t2 := t1.Add(time.Second)
	mustCreate(t, "slice", c.DiscoveryV1().EndpointSlices(ns).Create, slice("web", "web-a", discoveryv1.AddressTypeIPv4, 8080, t1,
		ep{ip: "10.244.1.5", ready: true, node: "n1", host: "h1", podName: "a"},
		ep{ip: "10.244.1.6", node: "n1", podName: "b"},
		ep{ip: "10.244.1.7", terminating: true, podName: "c"},
		ep{ip: "10.244.1.8", readyUnknown: true}))
	// The same service on another port set (a named targetPort resolving
	// differently), and an IPv6 slice, which single-family Endpoints skip.
	mustCreate(t, "slice", c.DiscoveryV1().EndpointSlices(ns).Create, slice("web", "web-b", discoveryv1.AddressTypeIPv4, 9090, t2, ep{ip: "10.244.2.9", ready: true}))
	mustCreate(t, "slice", c.DiscoveryV1().EndpointSlices(ns).Create, slice("web", "web-v6", discoveryv1.AddressTypeIPv6, 8080, time.Time{}, ep{ip: "fd00::5", ready: true}))

	got := waitEndpoints(t, c, "web", "two subsets", func(e *corev1.Endpoints) bool { return e != nil && len(e.Subsets) == 2 })
	a, b := got.Subsets[0], got.Subsets[1]
	if !slices.Equal(ips(a.Addresses), []string{"10.244.1.5", "10.244.1.8"}) || !slices.Equal(ips(a.NotReadyAddresses), []string{"10.244.1.6"}) ||
		len(a.Ports) != 1 || a.Ports[0] != (corev1.EndpointPort{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}) {
		t.Errorf("subset 8080: %+v", a)
	}
	if first := a.Addresses[0]; first.Hostname != "h1" || first.NodeName == nil || *first.NodeName != "n1" || first.TargetRef == nil || first.TargetRef.Name != "a" {
		t.Errorf("address fields not mirrored: %+v", first)
	}
	if !slices.Equal(ips(b.Addresses), []string{"10.244.2.9"}) || b.Ports[0].Port != 9090 {
		t.Errorf("subset 9090: %+v", b)
	}
	wantLabels := map[string]string{"app": "web", LabelManagedBy: ControllerName}
	if !maps.Equal(got.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", got.Labels, wantLabels)
	}
	if ts := got.Annotations[corev1.EndpointsLastChangeTriggerTime]; ts != t2.Format(time.RFC3339Nano) {
		t.Errorf("trigger time %q, want the latest slice's %q", ts, t2.Format(time.RFC3339Nano))
	}

	// Idempotent: a Service change that does not touch the endpoints, or a
	// controller restart, writes nothing.
	rv := got.ResourceVersion
	svc.Annotations = map[string]string{"touched": "yes"}
	mark := ctl.q.Mark()
	if _, err := c.CoreV1().Services(ns).Update(testapi.Context(t), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctl.q.Wait(t, ns+"/web", mark, nil)
	if e, _ := c.CoreV1().Endpoints(ns).Get(testapi.Context(t), "web", metav1.GetOptions{}); e.ResourceVersion != rv {
		t.Errorf("an unrelated Service update rewrote the Endpoints (rv %s -> %s)", rv, e.ResourceVersion)
	}

	// A hand edit is put right.
	edited := got.DeepCopy()
	edited.Subsets = nil
	if _, err := c.CoreV1().Endpoints(ns).Update(testapi.Context(t), edited, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, "web", "hand edit reverted", func(e *corev1.Endpoints) bool { return e != nil && len(e.Subsets) == 2 })

	// A slice change is followed: the not-ready endpoint becomes ready.
	sa, _ := c.DiscoveryV1().EndpointSlices(ns).Get(testapi.Context(t), "web-a", metav1.GetOptions{})
	sa.Endpoints[1].Conditions.Ready = ptr(true)
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Update(testapi.Context(t), sa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, "web", "endpoint became ready", func(e *corev1.Endpoints) bool {
		return e != nil && len(e.Subsets) == 2 && len(e.Subsets[0].Addresses) == 3 && len(e.Subsets[0].NotReadyAddresses) == 0
	})
}

// TestRestartWritesNothing: a fresh controller over converged Endpoints
// leaves them alone.
func TestRestartWritesNothing(t *testing.T) {
	s := testapi.Start(t)
	c := s.Client
	first := run(t, c)
	mustCreate(t, "service", c.CoreV1().Services(ns).Create, service("web", map[string]string{"app": "web"}))
	mustCreate(t, "slice", c.DiscoveryV1().EndpointSlices(ns).Create, slice("web", "web-a", discoveryv1.AddressTypeIPv4, 8080, time.Now(), ep{ip: "10.244.1.5", ready: true}))
	got := waitEndpoints(t, c, "web", "mirrored", func(e *corev1.Endpoints) bool { return e != nil && len(e.Subsets) == 1 })
	first.stop()
	// The new instance queues every Service as its informers list them.
	run(t, c).q.Wait(t, ns+"/web", 0, nil)
	if e, _ := c.CoreV1().Endpoints(ns).Get(testapi.Context(t), "web", metav1.GetOptions{}); e.ResourceVersion != got.ResourceVersion {
		t.Errorf("restarted controller rewrote converged Endpoints (rv %s -> %s)", got.ResourceVersion, e.ResourceVersion)
	}
}

// TestOverCapacity: beyond 1000 addresses the Endpoints are truncated and
// annotated, as upstream; back under, the annotation goes.
func TestOverCapacity(t *testing.T) {
	s := testapi.Start(t)
	c := s.Client
	run(t, c)
	mustCreate(t, "service", c.CoreV1().Services(ns).Create, service("big", map[string]string{"app": "big"}))
	for i := range 3 {
		var eps []ep
		for j := range 400 {
			eps = append(eps, ep{ip: fmt.Sprintf("10.%d.%d.%d", 100+i, j/200, j%200+1), ready: true})
		}
		mustCreate(t, "slice", c.DiscoveryV1().EndpointSlices(ns).Create, slice("big", fmt.Sprintf("big-%d", i), discoveryv1.AddressTypeIPv4, 8080, time.Time{}, eps...))
	}
	got := waitEndpoints(t, c, "big", "truncated endpoints", func(e *corev1.Endpoints) bool {
		return e != nil && e.Annotations[corev1.EndpointsOverCapacity] == "truncated"
	})
	if n := len(got.Subsets[0].Addresses); len(got.Subsets) != 1 || n != 1000 {
		t.Errorf("%d subsets, %d addresses; want 1 subset of 1000", len(got.Subsets), n)
	}
	if err := c.DiscoveryV1().EndpointSlices(ns).Delete(testapi.Context(t), "big-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, "big", "annotation removed", func(e *corev1.Endpoints) bool {
		if e == nil {
			return false
		}
		_, over := e.Annotations[corev1.EndpointsOverCapacity]
		return !over && len(e.Subsets) == 1 && len(e.Subsets[0].Addresses) == 800
	})
}

// TestWhoseEndpoints: headless Services get upstream's label; Endpoints go
// with their Service; a Service that loses its selector loses our
// Endpoints, while Endpoints a user wrote for a selector-less Service are
// left alone.
func TestWhoseEndpoints(t *testing.T) {
	s := testapi.Start(t)
	c := s.Client
	ctl := run(t, c)
	h := service("headless", map[string]string{"app": "h"})
	h.Spec.ClusterIP = corev1.ClusterIPNone
	mustCreate(t, "service", c.CoreV1().Services(ns).Create, h)
	waitEndpoints(t, c, "headless", "headless label", func(e *corev1.Endpoints) bool {
		if e == nil {
			return false
		}
		_, ok := e.Labels[corev1.IsHeadlessService]
		return ok
	})

	manual := mustCreate(t, "service", c.CoreV1().Services(ns).Create, service("manual", nil))
	mine := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "manual", Namespace: ns},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.10"}}, Ports: []corev1.EndpointPort{{Port: 80}}}}}
	mark := ctl.q.Mark() // the user's Endpoints queue their Service
	mine = mustCreate(t, "endpoints", c.CoreV1().Endpoints(ns).Create, mine)

	sel := mustCreate(t, "service", c.CoreV1().Services(ns).Create, service("sel", map[string]string{"app": "sel"}))
	waitEndpoints(t, c, "sel", "endpoints of sel", func(e *corev1.Endpoints) bool { return e != nil })
	sel.Spec.Selector = nil
	if _, err := c.CoreV1().Services(ns).Update(testapi.Context(t), sel, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, "sel", "endpoints gone with the selector", func(e *corev1.Endpoints) bool { return e == nil })

	ctl.q.Wait(t, ns+"/manual", mark, nil)
	if e, err := c.CoreV1().Endpoints(ns).Get(testapi.Context(t), "manual", metav1.GetOptions{}); err != nil || e.ResourceVersion != mine.ResourceVersion {
		t.Errorf("user's Endpoints of a selector-less Service touched: %v %v", e, err)
	}
	if err := c.CoreV1().Services(ns).Delete(testapi.Context(t), manual.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Services(ns).Delete(testapi.Context(t), "headless", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"manual", "headless"} {
		waitEndpoints(t, c, name, name+" endpoints deleted with the Service", func(e *corev1.Endpoints) bool { return e == nil })
	}
	if _, err := c.CoreV1().Endpoints(ns).Get(testapi.Context(t), "sel", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("sel endpoints: %v, want NotFound", err)
	}
}

func TestNewRefusesNil(t *testing.T) {
	if _, err := New(nil, nil, nil, nil); err == nil {
		t.Error("New(nil, nil) accepted")
	}
}
