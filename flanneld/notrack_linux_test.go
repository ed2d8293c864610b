package flanneld

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

var testNoTrack = noTrackFamily{vtep: netip.MustParseAddr("192.168.50.2"), public: netip.MustParseAddr("203.0.113.7"), port: DefaultVXLANPort}

// TestNoTrackIPTables: the chain and its two jumps as iptables-save shows
// them, written once, repaired after drift, removed by Cleanup.
func TestNoTrackIPTables(t *testing.T) {
	ns := nettest.New(t)
	nettest.RequireTool(t, "iptables-restore")
	ctx := t.Context()
	m := newIPTablesNoTrack(newIPTablesMasq(detectIPTables(Netns(ns.Name()), testapi.Logger()), nil), []noTrackFamily{testNoTrack})
	mustSync(t, ctx, m, true)
	mustSync(t, ctx, m, false)
	raw := string(ns.MustExec(t, "iptables-save", "-t", "raw"))
	for _, want := range []string{
		`-A PREROUTING -m comment --comment "nodenet flanneld vxlan notrack" -j NODENET-FLANNEL-NOTRACK`,
		`-A OUTPUT -m comment --comment "nodenet flanneld vxlan notrack" -j NODENET-FLANNEL-NOTRACK`,
		`-A NODENET-FLANNEL-NOTRACK -d 192.168.50.2/32 -p udp -m udp --dport 8472 -m comment --comment "nodenet flanneld vxlan notrack" -j NOTRACK`,
		`-A NODENET-FLANNEL-NOTRACK -d 203.0.113.7/32 -p udp -m udp --dport 8472 -m comment --comment "nodenet flanneld vxlan notrack" -j NOTRACK`,
		`-A NODENET-FLANNEL-NOTRACK -s 192.168.50.2/32 -p udp -m udp --dport 8472 -m comment --comment "nodenet flanneld vxlan notrack" -j NOTRACK`,
	} {
		if !strings.Contains(raw, want+"\n") {
			t.Fatalf("raw table lacks\n%s\ngot:\n%s", want, raw)
		}
	}
	once := func() {
		t.Helper()
		raw := string(ns.MustExec(t, "iptables-save", "-t", "raw"))
		if strings.Count(raw, "-j "+chainNoTrack) != 2 || strings.Count(raw, "-A "+chainNoTrack+" ") != 3 {
			t.Fatalf("rules not exactly once:\n%s", raw)
		}
	}
	// Drift: a rule deleted, a jump duplicated.
	ns.MustExec(t, "iptables", "-t", "raw", "-D", chainNoTrack, "1")
	ns.MustExec(t, "iptables", "-t", "raw", "-A", "OUTPUT", "-m", "comment", "--comment", commentNoTrack, "-j", chainNoTrack)
	mustSync(t, ctx, m, true)
	once()

	removed, err := m.Cleanup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(removed, "; "); got != "IPv4 2 jump(s) to raw NODENET-FLANNEL-NOTRACK; IPv4 chain raw NODENET-FLANNEL-NOTRACK" {
		t.Errorf("Cleanup reported %q", got)
	}
	if all := string(ns.MustExec(t, "iptables-save")); strings.Contains(all, chainNoTrack) {
		t.Fatalf("cleanup left:\n%s", all)
	}
	if again, err := m.Cleanup(ctx); err != nil || len(again) != 0 {
		t.Fatalf("second Cleanup: %q, %v", again, err)
	}
}

// TestNoTrackNFTables: the same exemption as one nftables table per
// family, at raw priority, replaced when it drifts.
func TestNoTrackNFTables(t *testing.T) {
	ns := nettest.New(t)
	nettest.RequireTool(t, "nft")
	ctx := t.Context()
	v6 := noTrackFamily{vtep: netip.MustParseAddr("fd00:50::2"), port: DefaultVXLANPort}
	m := newNFTNoTrack(Netns(ns.Name()), []noTrackFamily{testNoTrack, v6})
	mustSync(t, ctx, m, true)
	mustSync(t, ctx, m, false)
	rs := string(ns.MustExec(t, "nft", "list", "ruleset"))
	for _, want := range []string{
		"table ip nodenet-flannel-notrack", "table ip6 nodenet-flannel-notrack",
		"type filter hook prerouting priority raw; policy accept;",
		"type filter hook output priority raw; policy accept;",
		"ip daddr 192.168.50.2 udp dport 8472 notrack",
		"ip daddr 203.0.113.7 udp dport 8472 notrack",
		"ip saddr 192.168.50.2 udp dport 8472 notrack",
		"ip6 daddr fd00:50::2 udp dport 8472 notrack",
		"ip6 saddr fd00:50::2 udp dport 8472 notrack",
	} {
		if !strings.Contains(rs, want) {
			t.Fatalf("ruleset lacks %q:\n%s", want, rs)
		}
	}
	before := string(ns.MustExec(t, "nft", "list", "table", "ip", nftNoTrack))
	ns.MustExec(t, "nft", "flush", "chain", "ip", nftNoTrack, "output")
	mustSync(t, ctx, m, true)
	if after := string(ns.MustExec(t, "nft", "list", "table", "ip", nftNoTrack)); after != before {
		t.Fatalf("repair differs:\n%s\nwant:\n%s", after, before)
	}
	if _, err := m.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if rs := string(ns.MustExec(t, "nft", "list", "ruleset")); strings.Contains(rs, nftNoTrack) {
		t.Fatalf("cleanup left:\n%s", rs)
	}
}

// TestVXLANNoTrackKeepsTunnelOutOfConntrack runs two vxlan nodes, both
// masquerading (so conntrack runs in their namespaces), and sends pod
// traffic between them: with --vxlan-notrack no node tracks an outer flow,
// in either backend, while the pods' own flows are still tracked; without
// it (the control) the outer flows are there. Then a node switched to
// --vxlan-notrack=false drops the exemption.
func TestVXLANNoTrackKeepsTunnelOutOfConntrack(t *testing.T) {
	nettest.SkipShort(t, "daemons and VXLAN traffic in namespaces")
	nettest.RequirePrivileged(t)
	nettest.RequireSysfs(t, "/sys/module/vxlan")
	nettest.RequireTool(t, "nft")
	nettest.RequireTool(t, "iptables-save")
	nettest.RequireTool(t, "conntrack")
	api := testapi.Start(t)
	startIPAM(t, api)
	port := strconv.Itoa(DefaultVXLANPort)
	for _, tc := range []struct {
		name, masq string
		notrack    bool
	}{
		{"iptables", MasqIPTables, true},
		{"nftables", MasqNFTables, true},
		{"tracked", MasqIPTables, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, api, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, 2)
			for _, nd := range c.nodes {
				o := c.options(nd)
				o.MasqBackend, o.VXLANNoTrack = tc.masq, tc.notrack
				c.startWith(nd, o)
				c.wirePod(nd)
			}
			n1, n2 := c.nodes[0], c.nodes[1]
			serveEcho(t, n2.pod, 7777)
			for _, nd := range c.nodes {
				nd.ns.MustExec(t, "conntrack", "-F")
			}
			for _, proto := range []string{"tcp", "udp"} {
				if err := echoOnce(n1.pod, proto, netip.AddrPortFrom(n2.podIP, 7777).String(), "across"); err != nil {
					t.Fatal(err)
				}
			}
			for _, nd := range c.nodes {
				outer := string(nd.ns.MustExec(t, "conntrack", "-L", "-p", "udp", "--dport", port))
				inner := string(nd.ns.MustExec(t, "conntrack", "-L", "-d", n2.podIP.String()))
				if tc.notrack && strings.Contains(outer, "dport="+port) {
					t.Errorf("%s tracks the tunnel:\n%s", nd.name, outer)
				}
				if !tc.notrack && !strings.Contains(outer, "dport="+port) {
					t.Errorf("control: %s tracks no tunnel flow (the check above could not fail):\n%s", nd.name, outer)
				}
				if !strings.Contains(inner, "dport=7777") {
					t.Errorf("%s: the pods' own flow is not tracked:\n%s", nd.name, inner)
				}
			}
			if !tc.notrack {
				return
			}
			// Restarted without the exemption: it goes.
			c.stop(n1)
			o := c.options(n1)
			o.MasqBackend = tc.masq
			c.startWith(n1, o)
			if out := string(n1.ns.MustExec(t, "iptables-save", "-t", "raw")) + string(n1.ns.MustExec(t, "nft", "list", "tables")); strings.Contains(out, chainNoTrack) || strings.Contains(out, nftNoTrack) {
				t.Fatalf("--vxlan-notrack=false left the exemption:\n%s", out)
			}
		})
	}
}
