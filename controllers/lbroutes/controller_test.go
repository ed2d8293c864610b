package lbroutes

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/routes"
)

const pool = "172.30.0.224/28"

func node(name, ip string, ready bool) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}},
	}}
}

// lbService creates a LoadBalancer Service and publishes ip as its
// ingress, as the loadbalancer controller would.
func lbService(t *testing.T, c kubernetes.Interface, name, ip string, local bool) {
	t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": name}}}
	if local {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	s, err := c.CoreV1().Services("default").Create(t.Context(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	if _, err := c.CoreV1().Services("default").UpdateStatus(t.Context(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setReady(t *testing.T, c kubernetes.Interface, name string, ready bool) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status = node(name, n.Status.Addresses[0].Address, ready).Status
	if _, err := c.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// gateway is the gateway of the owned route to ip in the fake table, or "".
func gateway(tab *routes.Fake, ip string) string {
	for _, r := range tab.All() {
		if r.Dst.String() == ip+"/32" && r.Protocol == routes.ProtocolNodenet {
			return r.Gw.String()
		}
	}
	return ""
}

func TestRoutesFollowServicesAndNodes(t *testing.T) {
	s := testapi.Start(t)
	c := s.Client
	ips := map[string]string{"n1": "172.30.0.11", "n2": "172.30.0.12", "n3": "172.30.0.13"}
	for name, ip := range ips {
		if _, err := c.CoreV1().Nodes().Create(t.Context(), node(name, ip, false), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		setReady(t, c, name, true)
	}
	tab, err := routes.NewFake(0, routes.ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	// Not ours to touch: an administrator's route in the pool, the cloud
	// route controller's podCIDR route, and a stale route of ours.
	mustOK(t, tab.AddForeign(routes.Route{Dst: pfx("172.30.0.238/32"), Gw: addr("172.30.0.13")}))
	mustOK(t, tab.Add(t.Context(), routes.Route{Dst: pfx("10.244.1.0/24"), Gw: addr("172.30.0.11")}))
	mustOK(t, tab.Add(t.Context(), routes.Route{Dst: pfx("172.30.0.230/32"), Gw: addr("172.30.0.11")}))
	rec := record.NewFakeRecorder(100)
	testapi.RunController(t, c, "nodenet-lbroutes", 1, func(f informers.SharedInformerFactory, _ record.EventRecorder) (testapi.Runner, error) {
		return New(f, Options{Table: tab, Pools: []netip.Prefix{pfx(pool)}, ReconcilePeriod: 200 * time.Millisecond}, rec, testapi.Logger())
	})

	lbService(t, c, "web", "172.30.0.225", false)
	lbService(t, c, "outside", "198.51.100.7", false) // not in the pool: someone else's
	var gw string
	testapi.Eventually(t, 10*time.Second, "a route for web's IP", func() bool { gw = gateway(tab, "172.30.0.225"); return gw != "" })
	testapi.Eventually(t, 10*time.Second, "the stale route gone", func() bool { return gateway(tab, "172.30.0.230") == "" })
	dump := tab.Dump()
	for _, want := range []string{"172.30.0.238/32 via 172.30.0.13 proto 4", "10.244.1.0/24 via 172.30.0.11 proto 78"} {
		if !strings.Contains(dump, want) {
			t.Errorf("route %q not kept:\n%s", want, dump)
		}
	}
	if strings.Contains(dump, "198.51.100.7") {
		t.Errorf("routed an address outside the pool:\n%s", dump)
	}

	// The node carrying the address fails: the route moves to another.
	var failed string
	for name, ip := range ips {
		if ip == gw {
			failed = name
		}
	}
	setReady(t, c, failed, false)
	testapi.Eventually(t, 10*time.Second, "the route off not-Ready "+failed, func() bool {
		g := gateway(tab, "172.30.0.225")
		return g != "" && g != gw
	})

	// A route removed by hand comes back on the next resync.
	now := gateway(tab, "172.30.0.225")
	tab.DeleteOwned(routes.Route{Dst: pfx("172.30.0.225/32"), Gw: addr(now)})
	testapi.Eventually(t, 10*time.Second, "the route repaired", func() bool { return gateway(tab, "172.30.0.225") == now })

	// externalTrafficPolicy Local: only a node with a ready endpoint.
	lbService(t, c, "local", "172.30.0.226", true)
	testapi.Eventually(t, 10*time.Second, "an event for the Local service without endpoints", func() bool {
		select {
		case e := <-rec.Events:
			t.Logf("event: %s", e)
			return strings.Contains(e, "NoNodeForLoadBalancerIP") && strings.Contains(e, "172.30.0.226")
		default:
			return false
		}
	})
	if g := gateway(tab, "172.30.0.226"); g != "" {
		t.Errorf("Local service without endpoints routed via %s", g)
	}
	onNode := "n1"
	if failed == onNode {
		onNode = "n2"
	}
	endpointOn(t, c, "local", onNode)
	testapi.Eventually(t, 10*time.Second, "Local service routed to its endpoint's node", func() bool { return gateway(tab, "172.30.0.226") == ips[onNode] })

	// Deleted Service: route gone.
	if err := c.CoreV1().Services("default").Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, 10*time.Second, "web's route gone", func() bool { return gateway(tab, "172.30.0.225") == "" })
	t.Logf("final table:\n%s", tab.Dump())
}

func endpointOn(t *testing.T, c kubernetes.Interface, svc, node string) {
	t.Helper()
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.9.9"}, NodeName: &node}},
	}
	if _, err := c.DiscoveryV1().EndpointSlices("default").Create(t.Context(), sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestOptionsValidate: New refuses what Validate refuses.
func TestOptionsValidate(t *testing.T) {
	tab, _ := routes.NewFake(0, routes.ProtocolNodenet)
	f := informers.NewSharedInformerFactory(nil, 0)
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Table: tab}, "--lb-ip-pool: at least one CIDR"},
		{Options{Table: tab, Pools: []netip.Prefix{pfx("172.30.0.225/28")}}, "host bits set"},
		{Options{Pools: []netip.Prefix{pfx(pool)}}, "no route table"},
		{Options{Table: tab, Pools: []netip.Prefix{pfx(pool)}, ReconcilePeriod: -time.Second}, "must be positive"},
	} {
		err := c.o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error containing %q", c.o, err, c.want)
		}
		if _, nerr := New(f, c.o, nil, nil); fmt.Sprint(nerr) != fmt.Sprint(err) {
			t.Errorf("New(%+v) = %v, want Validate's %v", c.o, nerr, err)
		}
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }
