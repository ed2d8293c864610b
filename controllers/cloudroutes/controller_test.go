package cloudroutes

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/routes"
)

// vpcNamespace is the local cluster's VPC router in miniature: eth0 with
// 192.168.50.1/24 and fd00:50::1/64, the node network, on a veth whose
// peer (the "nodes") has .254 so the link has carrier.
func vpcNamespace(t *testing.T) *nettest.NS {
	t.Helper()
	vpc, nodes := nettest.New(t), nettest.New(t)
	nettest.Link(t, vpc, "eth0", "192.168.50.1/24", nodes, "eth0", "192.168.50.254/24")
	eth0, err := vpc.Handle().LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	a, err := netlink.ParseAddr("fd00:50::1/64")
	if err != nil {
		t.Fatal(err)
	}
	a.Flags |= syscall.IFA_F_NODAD
	if err := vpc.Handle().AddrAdd(eth0, a); err != nil {
		t.Fatal(err)
	}
	return vpc
}

// vpcTable is vpcNamespace and our route table in its main table, open
// until the test ends.
func vpcTable(t *testing.T) (*nettest.NS, *routes.NetlinkTable) {
	t.Helper()
	vpc := vpcNamespace(t)
	table, err := routes.NewNetlinkTable(vpc.Path(), 0, routes.ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(table.Close)
	return vpc, table
}

// kernelRoutes lists the main table's routes with the given protocol
// straight from the kernel as "dst via gw", sorted.
func kernelRoutes(t *testing.T, ns *nettest.NS, proto netlink.RouteProtocol) []string {
	t.Helper()
	nrs, err := ns.Handle().RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Table: routes.MainTable, Protocol: proto}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, nr := range nrs {
		out = append(out, fmt.Sprintf("%s via %s", nr.Dst, nr.Gw))
	}
	slices.Sort(out)
	return out
}

func TestControllerProgramsVPCTable(t *testing.T) {
	nettest.RequirePrivileged(t)
	s := testapi.Start(t)
	vpc, table := vpcTable(t)
	ctx := t.Context()

	// Already in the table before the controller starts: an
	// administrator's route inside the cluster CIDR, one of ours outside
	// it (both must survive), and one of ours for a node that no longer
	// exists (must go: state is rebuilt from the kernel on start).
	vpc.MustExec(t, "ip", "route", "add", "10.244.200.0/24", "via", "192.168.50.254", "proto", "static")
	outside := routes.Route{Dst: pfx("172.16.0.0/24"), Gw: ip("192.168.50.254")}
	stale := routes.Route{Dst: pfx("10.244.99.0/24"), Gw: ip("192.168.50.99")}
	for _, r := range []routes.Route{outside, stale} {
		if err := table.Add(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	foreign := []string{"10.244.200.0/24 via 192.168.50.254"}
	const outsideRoute = "172.16.0.0/24 via 192.168.50.254"

	createNode(t, s.Client, testNode("a", []string{"10.244.1.0/24"}, "192.168.50.11"))
	startController(t, s.Client, Options{
		Table:           table,
		ClusterCIDRs:    cidrlist.MustParse("10.244.0.0/16,fd00:244::/56"),
		ReconcilePeriod: 200 * time.Millisecond,
	}, nil)
	createNode(t, s.Client, testNode("b", []string{"10.244.2.0/24", "fd00:244:0:2::/64"}, "192.168.50.12", "fd00:50::12"))
	createNode(t, s.Client, testNode("c", []string{"10.244.3.0/24"}, "host:c"))       // no InternalIP yet
	createNode(t, s.Client, testNode("d", []string{"10.99.0.0/24"}, "192.168.50.14")) // outside the cluster CIDRs

	expect := func(what string, want ...string) {
		t.Helper()
		want = append(want, outsideRoute)
		slices.Sort(want)
		var got []string
		testapi.Eventually(t, 10*time.Second, what, func() bool {
			got = kernelRoutes(t, vpc, routes.ProtocolNodenet)
			return slices.Equal(got, want)
		})
		if got := kernelRoutes(t, vpc, netlink.RouteProtocol(4)); !slices.Equal(got, foreign) {
			t.Fatalf("%s: foreign routes %v, want %v", what, got, foreign)
		}
	}

	expect("routes for a and b",
		"10.244.1.0/24 via 192.168.50.11",
		"10.244.2.0/24 via 192.168.50.12",
		"fd00:244:0:2::/64 via fd00:50::12")
	expectRouteCreated(t, s.Client, "a", "b")
	for _, name := range []string{"c", "d"} {
		if c := networkCondition(t, s.Client, name); c != nil {
			t.Errorf("node %s without a route got condition %+v", name, c)
		}
	}

	setInternalIPs(t, s.Client, "c", "192.168.50.13")
	expect("route for c once it has an InternalIP",
		"10.244.1.0/24 via 192.168.50.11",
		"10.244.2.0/24 via 192.168.50.12",
		"10.244.3.0/24 via 192.168.50.13",
		"fd00:244:0:2::/64 via fd00:50::12")
	expectRouteCreated(t, s.Client, "c")

	setInternalIPs(t, s.Client, "a", "192.168.50.21")
	expect("a's route to follow its new IP",
		"10.244.1.0/24 via 192.168.50.21",
		"10.244.2.0/24 via 192.168.50.12",
		"10.244.3.0/24 via 192.168.50.13",
		"fd00:244:0:2::/64 via fd00:50::12")

	// Drift: no API event will announce it, only the resync repairs it.
	vpc.MustExec(t, "ip", "route", "del", "10.244.2.0/24", "proto", "78")
	vpc.MustExec(t, "ip", "-6", "route", "del", "fd00:244:0:2::/64", "proto", "78")
	expect("deleted routes to be repaired",
		"10.244.1.0/24 via 192.168.50.21",
		"10.244.2.0/24 via 192.168.50.12",
		"10.244.3.0/24 via 192.168.50.13",
		"fd00:244:0:2::/64 via fd00:50::12")

	if err := s.Client.CoreV1().Nodes().Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("a's route to go with it",
		"10.244.2.0/24 via 192.168.50.12",
		"10.244.3.0/24 via 192.168.50.13",
		"fd00:244:0:2::/64 via fd00:50::12")

	out := string(vpc.MustExec(t, "ip", "route", "show", "10.244.200.0/24"))
	if !strings.Contains(out, "proto static") {
		t.Errorf("administrator's route changed: %q", out)
	}
}
