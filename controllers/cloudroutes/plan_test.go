package cloudroutes

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/routes"
)

// testNode builds a node; addresses are InternalIPs unless prefixed with
// "host:" (a Hostname address).
func testNode(name string, podCIDRs []string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDRs: podCIDRs}}
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR = podCIDRs[0]
	}
	for _, a := range addrs {
		if h, ok := strings.CutPrefix(a, "host:"); ok {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: h})
			continue
		}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

func TestPlanRoutes(t *testing.T) {
	cfg, err := Options{Table: &routes.Fake{}, ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16,fd00:244::/56")}.validate()
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*corev1.Node{
		testNode("d-dual", []string{"10.244.4.0/24", "fd00:244:0:4::/64"}, "192.168.50.14", "fd00:50::14"),
		testNode("a", []string{"10.244.1.0/24"}, "host:a", "192.168.50.11"),
		testNode("b-v6-missing", []string{"10.244.2.0/24", "fd00:244:0:2::/64"}, "192.168.50.12"),
		testNode("c-no-ip", []string{"10.244.3.0/24"}, "host:c"),
		testNode("e-outside", []string{"10.99.0.0/24"}, "192.168.50.15"),
		testNode("f-no-cidr", nil, "192.168.50.16"),
		testNode("g-conflict", []string{"10.244.1.0/24"}, "192.168.50.17"),
		// IPv6 InternalIP listed first must not serve an IPv4 podCIDR.
		testNode("h-order", []string{"10.244.8.0/24"}, "fd00:50::18", "192.168.50.18"),
		{ObjectMeta: metav1.ObjectMeta{Name: "i-legacy"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.9.0/24"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.50.19"}}}},
	}
	p := planRoutes(nodes, cfg)

	var got []string
	for _, r := range p.desired {
		got = append(got, r.String()+" "+p.owner[r.Dst].Name)
	}
	want := []string{
		"10.244.1.0/24 via 192.168.50.11 a",
		"10.244.2.0/24 via 192.168.50.12 b-v6-missing",
		"10.244.4.0/24 via 192.168.50.14 d-dual",
		"fd00:244:0:4::/64 via fd00:50::14 d-dual",
		"10.244.8.0/24 via 192.168.50.18 h-order",
		"10.244.9.0/24 via 192.168.50.19 i-legacy",
	}
	if !slices.Equal(got, want) {
		t.Errorf("desired:\n%q\nwant\n%q", got, want)
	}

	var complete []string
	for _, n := range p.complete {
		complete = append(complete, n.Name)
	}
	if want := []string{"a", "d-dual", "h-order", "i-legacy"}; !slices.Equal(complete, want) {
		t.Errorf("complete = %v, want %v", complete, want)
	}

	skipped := slices.SortedFunc(maps.Keys(p.skipped), func(a, b podCIDRKey) int {
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.podCIDR, b.podCIDR))
	})
	wantSkipped := []podCIDRKey{
		{"b-v6-missing", "fd00:244:0:2::/64"},
		{"c-no-ip", "10.244.3.0/24"},
		{"g-conflict", "10.244.1.0/24"},
	}
	if !slices.Equal(skipped, wantSkipped) {
		t.Errorf("skipped = %v (%v), want %v", skipped, p.skipped, wantSkipped)
	}
}

func TestRouteRelevantChange(t *testing.T) {
	base := testNode("a", []string{"10.244.1.0/24"}, "192.168.50.11")
	heartbeat := base.DeepCopy()
	heartbeat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	heartbeat.Status.Addresses = append(heartbeat.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "a"})
	heartbeat.Labels = map[string]string{"x": "y"}
	if routeRelevantChange(base, heartbeat) {
		t.Error("heartbeat, labels and hostname counted as relevant")
	}
	moved := base.DeepCopy()
	moved.Status.Addresses[0].Address = "192.168.50.21"
	available := base.DeepCopy()
	available.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse}}
	cidr := testNode("a", nil, "192.168.50.11")
	for name, n := range map[string]*corev1.Node{"InternalIP": moved, "condition": available, "podCIDR": cidr} {
		if !routeRelevantChange(base, n) {
			t.Errorf("%s change not relevant", name)
		}
	}
}
