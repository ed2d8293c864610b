package flanneld

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/routes"
)

// TestCleanup runs real daemons (two nodes, so there are peer routes, FDB
// and neighbour entries), stops them as an uninstall does, and checks that
// Cleanup removes every object of theirs and nothing the test put next to
// them that is not theirs: a nodenet-protocol route outside the cluster
// network, an administrator's route inside it, a bridge named like
// a vxlan device, another vxlan device, a foreign iptables rule. A second
// run has nothing to do.
func TestCleanup(t *testing.T) {
	nettest.SkipShort(t, "daemons on node namespaces")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "iptables-save")
	nettest.RequireTool(t, "nft")
	api := testapi.Start(t)
	startIPAM(t, api)
	for _, tc := range []struct {
		name, conf, masq, dev string
		// noConf: the ConfigMap is gone; the networks come from
		// subnet.env.
		noConf bool
		// notrack: the daemon ran with --vxlan-notrack; what the report
		// names of its rules.
		notrack string
	}{
		{name: "hostgw-iptables", conf: `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`, masq: MasqIPTables},
		{name: "vxlan-nftables-no-conf", conf: `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, masq: MasqNFTables, dev: "flannel.1", noConf: true,
			notrack: "nftables table ip " + nftNoTrack},
		{name: "vxlan-iptables", conf: `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, masq: MasqIPTables, dev: "flannel.1",
			notrack: "IPv4 chain raw " + chainNoTrack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, api, tc.conf, 2)
			var opts []Options
			for _, nd := range c.nodes {
				o := c.options(nd)
				o.MasqBackend = tc.masq
				o.VXLANNoTrack = tc.notrack != ""
				c.startWith(nd, o)
				opts = append(opts, o)
			}
			nd, o := c.nodes[0], opts[0]
			peer := c.subnet(c.nodes[1])
			waitKernel(t, nd, tc.dev, "peer route", func(s kernelState) bool {
				_, ok := s.routeTo(peer)
				return ok
			})
			foreign := addForeignState(t, nd.ns)
			for _, n := range c.nodes {
				c.stop(n)
			}

			co := CleanupOptions{Netns: o.Netns, NetConfPath: o.NetConfPath, SubnetFile: o.SubnetFile, InstallCNIConf: o.InstallCNIConf, Logger: testapi.Logger()}
			if tc.noConf {
				co.NetConfPath = "/nonexistent/net-conf.json"
			}
			removed, err := Cleanup(t.Context(), co)
			if err != nil {
				t.Fatalf("Cleanup: %v (removed %q)", err, removed)
			}
			all := strings.Join(removed, "\n")
			masq := "IPv4 chain nat " + chainMasq
			if tc.masq == MasqNFTables {
				masq = "nftables table ip " + nftTable
			}
			for _, want := range []string{"route " + peer.String(), "subnet.env", "CNI conflist", masq, tc.dev, tc.notrack} {
				if !strings.Contains(all, want) {
					t.Errorf("report lacks %q:\n%s", want, all)
				}
			}
			checkCleaned(t, nd, o, peer)
			foreign.check(t, nd.ns)

			again, err := Cleanup(t.Context(), co)
			if err != nil || len(again) != 0 {
				t.Fatalf("second Cleanup: %v, removed %q; want nothing to do", err, again)
			}
		})
	}
}

// checkCleaned: nothing of flanneld's is left in nd's namespace or files.
func checkCleaned(t *testing.T, nd *testNode, o Options, peer netip.Prefix) {
	t.Helper()
	if r, ok := readKernel(t, nd, "").routeTo(peer); ok {
		t.Errorf("route %s left", r)
	}
	links, err := nd.ns.Handle().LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Type() == "vxlan" && strings.HasPrefix(l.Attrs().Name, "flannel") {
			t.Errorf("vxlan device %s left", l.Attrs().Name)
		}
	}
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		if out := string(nd.ns.MustExec(t, tool)); strings.Contains(out, "NODENET-FLANNEL") {
			t.Errorf("%s after cleanup:\n%s", tool, out)
		}
	}
	if out := string(nd.ns.MustExec(t, "nft", "list", "tables")); strings.Contains(out, nftTable) {
		t.Errorf("nft tables after cleanup:\n%s", out)
	}
	for _, f := range []string{o.SubnetFile, o.InstallCNIConf} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s left (%v)", f, err)
		}
	}
}

// foreignState is what a test adds that Cleanup must leave.
type foreignState struct {
	ownOutside routes.Route // our protocol, outside the cluster network
	adminRoute string       // `ip route` destination inside it, proto static
}

func addForeignState(t *testing.T, ns *nettest.NS) foreignState {
	t.Helper()
	tbl, err := routes.NewNetlinkTable(ns.Name(), 0, routes.ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	f := foreignState{ownOutside: routes.Route{Dst: netip.MustParsePrefix("10.99.0.0/24"), Gw: netip.MustParseAddr("192.168.50.1")}, adminRoute: "10.244.250.0/24"}
	if err := tbl.Add(t.Context(), f.ownOutside); err != nil {
		t.Fatal(err)
	}
	ns.MustExec(t, "ip", "route", "add", f.adminRoute, "via", "192.168.50.1", "proto", "static")
	ns.MustExec(t, "ip", "link", "add", "flannel.7", "type", "bridge")
	ns.MustExec(t, "ip", "link", "add", "vx-other", "type", "vxlan", "id", "7", "dstport", "4790", "dev", "eth0")
	ns.MustExec(t, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "10.244.0.0/16", "-m", "comment", "--comment", "not nodenet", "-j", "RETURN")
	return f
}

func (f foreignState) check(t *testing.T, ns *nettest.NS) {
	t.Helper()
	tbl, err := routes.NewNetlinkTable(ns.Name(), 0, routes.ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	own, err := tbl.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != 1 || !f.ownOutside.Matches(own[0]) {
		t.Errorf("nodenet-protocol routes after cleanup: %v, want only %s", own, f.ownOutside)
	}
	if out := string(ns.MustExec(t, "ip", "route", "show", f.adminRoute)); !strings.Contains(out, "proto static") {
		t.Errorf("administrator's route %s gone: %q", f.adminRoute, out)
	}
	for _, name := range []string{"flannel.7", "vx-other", "eth0"} {
		if _, err := ns.Handle().LinkByName(name); err != nil {
			t.Errorf("link %s: %v", name, err)
		}
	}
	if out := string(ns.MustExec(t, "iptables-save", "-t", "nat")); !strings.Contains(out, `--comment "not nodenet" -j RETURN`) {
		t.Errorf("foreign iptables rule gone:\n%s", out)
	}
}
