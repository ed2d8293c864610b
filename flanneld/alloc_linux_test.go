package flanneld

import (
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/routes"
	"github.com/nodenet/nodenet/subnetenv"
)

// TestAllocBackend switches two connected nodes from host-gw (and from
// vxlan) to alloc: the old backend's routes and devices go, subnet.env
// stays on the same subnet with the interface's MTU, no node holds a
// route to another node's podCIDR even with peers of every kind in the
// API, and pod traffic between nodes flows once — and only once — the
// "VPC router" (the lan namespace) has a route per podCIDR and the nodes
// default to it.
func TestAllocBackend(t *testing.T) {
	nettest.SkipShort(t, "daemons on several node namespaces")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "iptables-save")
	api := testapi.Start(t)
	startIPAM(t, api)
	for _, tc := range []struct{ name, from, dev string }{
		{"from-hostgw", `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`, ""},
		{"from-vxlan", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, "flannel.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, api, tc.from, 2)
			c.lan.MustExec(t, "ip", "addr", "add", "192.168.50.1/24", "dev", "br0")
			for _, nd := range c.nodes {
				c.start(nd)
				c.wirePod(nd)
			}
			n1, n2 := c.nodes[0], c.nodes[1]
			mustPing(t, n1.pod, n2.podIP)
			if _, ok := readKernel(t, n1, tc.dev).routeTo(c.subnet(n2)); !ok {
				t.Fatalf("%s holds no route to %s before the switch", n1.name, n2.name)
			}

			if err := os.WriteFile(c.conf, []byte(`{"Network":"10.244.0.0/16","Backend":{"Type":"alloc"}}`), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, nd := range c.nodes {
				c.stop(nd)
				c.start(nd)
			}
			for _, nd := range c.nodes {
				checkAllocNode(t, c, nd)
			}
			// Peers of every kind in the API change nothing: a host-gw
			// one on our L2 network would get a route from host-gw.
			createPeer(t, c, n1.name+"-hostgw", map[string]string{AnnKubeSubnetManager: "true", AnnBackendType: BackendHostGW,
				AnnPublicIP: "192.168.50.99", AnnBackendData: "null"})
			before := syncCount(t, n1.d.m.duration)
			testapi.Eventually(t, 10*time.Second, "two syncs after the new peer", func() bool {
				return syncCount(t, n1.d.m.duration) >= before+2
			})
			checkAllocNode(t, c, n1)

			// No route on the nodes, none in the router: pods are cut off.
			for _, nd := range c.nodes {
				nd.ns.MustExec(t, "ip", "route", "add", "default", "via", "192.168.50.1")
			}
			if err := c.lan.Do(func() error { return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644) }); err != nil {
				t.Fatal(err)
			}
			mustNotPing(t, n1.pod, n2.podIP)
			// The router's routes (the cloud route controller's job).
			for _, nd := range c.nodes {
				c.lan.MustExec(t, "ip", "route", "add", c.subnet(nd).String(), "via", nd.ip.String())
			}
			mustPing(t, n1.pod, n2.podIP)
			mustPing(t, n2.pod, n1.podIP)
		})
	}
}

// checkAllocNode: subnet.env on the node's podCIDR with the external MTU,
// upstream's alloc annotations, masquerade on, and no route to, device
// for or neighbour of another node.
func checkAllocNode(t *testing.T, c *testCluster, nd *testNode) {
	t.Helper()
	sn := c.subnet(nd)
	env, err := subnetenv.Read(nd.d.opts.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := subnetenv.FromSubnets(netip.MustParsePrefix(clusterCIDR), sn, netip.Prefix{}, netip.Prefix{}, 1500, true); env != want {
		t.Fatalf("%s: subnet.env %+v, want %+v", nd.name, env, want)
	}
	n, err := c.api.Client.CoreV1().Nodes().Get(t.Context(), nd.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := n.Annotations; a[AnnBackendType] != "" || a[AnnPublicIP] != nd.ip.String() || a[AnnBackendData] != "null" {
		t.Fatalf("%s: annotations %v, want upstream alloc's (empty backend-type, null backend-data)", nd.name, a)
	}
	if out := string(nd.ns.MustExec(t, "iptables-save", "-t", "nat")); strings.Count(out, "-j "+chainMasq) != 1 {
		t.Fatalf("%s: want exactly one jump to %s:\n%s", nd.name, chainMasq, out)
	}
	cluster := netip.MustParsePrefix(clusterCIDR)
	nrs, err := nd.ns.Handle().RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: routes.MainTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	for _, nr := range nrs {
		if nr.Dst == nil {
			continue
		}
		dst, ok := netip.AddrFromSlice(nr.Dst.IP)
		ones, _ := nr.Dst.Mask.Size()
		if p := netip.PrefixFrom(dst.Unmap(), ones); ok && cluster.Overlaps(p) && p != sn {
			t.Fatalf("%s: route %s on an alloc node (only its own subnet may be routed here)", nd.name, nr)
		}
	}
	links, err := nd.ns.Handle().LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "flannel") {
			t.Fatalf("%s: device %s left from the earlier backend", nd.name, l.Attrs().Name)
		}
	}
	if ok, why := nd.d.Ready(); !ok {
		t.Fatalf("%s: not ready: %s", nd.name, why)
	}
}

func createPeer(t *testing.T, c *testCluster, name string, ann map[string]string) {
	t.Helper()
	_, err := c.api.Client.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.subnet(&testNode{name: name})
}

func syncCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
