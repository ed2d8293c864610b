package flanneld

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/iptables/iptablestest"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

var testMasqFamilies = []masqFamily{{is4: true, network: netip.MustParsePrefix("10.244.0.0/16"), subnet: netip.MustParsePrefix("10.244.3.0/24")}}

// TestMasqIPTables checks the rules as iptables-save shows them in a
// throwaway namespace: upstream's rules in our chain, one jump each, no
// rewrite when nothing changed, repair of a deleted rule and of a
// duplicated jump, and a complete cleanup.
func TestMasqIPTables(t *testing.T) {
	ns := nettest.New(t)
	nettest.RequireTool(t, "iptables-restore")
	ctx := t.Context()
	m := newIPTablesMasq(detectIPTables(Netns(ns.Name()), testapi.Logger()), testMasqFamilies)
	mustSync(t, ctx, m, true)
	nat := string(ns.MustExec(t, "iptables-save", "-t", "nat"))
	for _, want := range []string{
		`-A POSTROUTING -m comment --comment "nodenet flanneld masq" -j NODENET-FLANNEL-MASQ`,
		`-A NODENET-FLANNEL-MASQ -m mark --mark 0x4000/0x4000 -m comment --comment "nodenet flanneld masq" -j RETURN`,
		`-A NODENET-FLANNEL-MASQ -s 10.244.3.0/24 -d 10.244.0.0/16 -m comment --comment "nodenet flanneld masq" -j RETURN`,
		`-A NODENET-FLANNEL-MASQ -s 10.244.0.0/16 -d 10.244.3.0/24 -m comment --comment "nodenet flanneld masq" -j RETURN`,
		`-A NODENET-FLANNEL-MASQ ! -s 10.244.0.0/16 -d 10.244.3.0/24 -m comment --comment "nodenet flanneld masq" -j RETURN`,
		`-A NODENET-FLANNEL-MASQ -s 10.244.0.0/16 ! -d 224.0.0.0/4 -m comment --comment "nodenet flanneld masq" -j MASQUERADE --random-fully`,
		`-A NODENET-FLANNEL-MASQ ! -s 10.244.0.0/16 -d 10.244.0.0/16 -m comment --comment "nodenet flanneld masq" -j MASQUERADE --random-fully`,
	} {
		if !strings.Contains(nat, want+"\n") {
			t.Fatalf("nat table lacks\n%s\ngot:\n%s", want, nat)
		}
	}
	filter := string(ns.MustExec(t, "iptables-save", "-t", "filter"))
	for _, want := range []string{
		`-A FORWARD -m comment --comment "nodenet flanneld forward" -j NODENET-FLANNEL-FWD`,
		`-A NODENET-FLANNEL-FWD -s 10.244.0.0/16 -m comment --comment "nodenet flanneld forward" -j ACCEPT`,
		`-A NODENET-FLANNEL-FWD -d 10.244.0.0/16 -m comment --comment "nodenet flanneld forward" -j ACCEPT`,
	} {
		if !strings.Contains(filter, want+"\n") {
			t.Fatalf("filter table lacks\n%s\ngot:\n%s", want, filter)
		}
	}
	mustSync(t, ctx, m, false)

	// A restarted daemon (fresh state) with the rules in place rewrites
	// once and never duplicates.
	m2 := newIPTablesMasq(detectIPTables(Netns(ns.Name()), testapi.Logger()), testMasqFamilies)
	mustSync(t, ctx, m2, true)
	mustSync(t, ctx, m2, false)
	checkOnce(t, ns)

	// Drift: a rule deleted, a jump duplicated.
	ns.MustExec(t, "iptables", "-t", "nat", "-D", chainMasq, "1")
	ns.MustExec(t, "iptables", "-t", "filter", "-A", "FORWARD", "-m", "comment", "--comment", commentFwd, "-j", chainFwd)
	mustSync(t, ctx, m2, true)
	checkOnce(t, ns)
	if !strings.Contains(string(ns.MustExec(t, "iptables-save", "-t", "nat")), "--mark 0x4000/0x4000") {
		t.Fatal("deleted rule not restored")
	}

	if _, err := m2.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	all := string(ns.MustExec(t, "iptables-save"))
	if strings.Contains(all, "NODENET-FLANNEL") {
		t.Fatalf("cleanup left:\n%s", all)
	}
}

// TestMasqIPTablesFollowsLegacy: on a node whose rules live in
// iptables-legacy (one rule per family in a throwaway namespace), the
// masquerade rules go to iptables-legacy in both families — where the
// proxy and the CNI plugin put theirs — and nothing to iptables-nft.
func TestMasqIPTablesFollowsLegacy(t *testing.T) {
	ns := iptablestest.LegacyNode(t)
	fams := append(testMasqFamilies, masqFamily{network: netip.MustParsePrefix("fd00:10:244::/56"), subnet: netip.MustParsePrefix("fd00:10:244:3::/64")})
	m := newIPTablesMasq(detectIPTables(Netns(ns.Name()), testapi.Logger()), fams)
	mustSync(t, t.Context(), m, true)
	mustSync(t, t.Context(), m, false)
	for _, tool := range []string{"iptables", "ip6tables"} {
		legacy := string(ns.MustExec(t, tool+"-legacy-save"))
		if strings.Count(legacy, "-j "+chainMasq+"\n") != 1 || strings.Count(legacy, "-j "+chainFwd+"\n") != 1 || strings.Count(legacy, "-A "+chainMasq+" ") != 6 {
			t.Errorf("%s-legacy lacks the masquerade rules:\n%s", tool, legacy)
		}
		if nft := string(ns.MustExec(t, tool+"-nft-save")); strings.Contains(nft, "NODENET-FLANNEL") {
			t.Errorf("%s-nft got rules too:\n%s", tool, nft)
		}
	}
	if _, err := m.Cleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if legacy := string(ns.MustExec(t, "iptables-legacy-save")); strings.Contains(legacy, "NODENET-FLANNEL") {
		t.Errorf("cleanup left:\n%s", legacy)
	}
}

// TestMasqIPTablesForwardAfterProxy: our FORWARD jump only accepts pod
// traffic, so it must come after the proxy's, which refuses new flows to
// Services without endpoints (and enforces loadBalancerSourceRanges): ahead
// of them it accepted a pod's SYN to such a Service, which left the node
// untranslated and kept its 5-tuple so in conntrack (the chaos suite's
// bursts of ClusterIP timeouts). The proxy inserts its jumps first; here
// it started before flanneld, and our jump is also put back after a flush.
func TestMasqIPTablesForwardAfterProxy(t *testing.T) {
	ns := nettest.New(t)
	nettest.RequireTool(t, "iptables-restore")
	ctx := t.Context()
	// The proxy's reject hook, as proxy/iptables writes it.
	proxyJump := `-A FORWARD -m conntrack --ctstate NEW -m comment --comment "nodenet service rejects" -j NODENET-SERVICES`
	ns.MustExec(t, "iptables", "-N", "NODENET-SERVICES")
	ns.MustExec(t, "iptables", "-I", "FORWARD", "-m", "conntrack", "--ctstate", "NEW", "-m", "comment", "--comment", "nodenet service rejects", "-j", "NODENET-SERVICES")
	m := newIPTablesMasq(detectIPTables(Netns(ns.Name()), testapi.Logger()), testMasqFamilies)
	ourJump := `-A FORWARD -m comment --comment "nodenet flanneld forward" -j NODENET-FLANNEL-FWD`
	order := func(when string) {
		t.Helper()
		filter := string(ns.MustExec(t, "iptables-save", "-t", "filter"))
		p, o := strings.Index(filter, proxyJump+"\n"), strings.Index(filter, ourJump+"\n")
		if p < 0 || o < 0 || o < p {
			t.Fatalf("%s: want the proxy's jump, then ours, in FORWARD:\n%s", when, filter)
		}
	}
	mustSync(t, ctx, m, true)
	order("flanneld started after the proxy")
	ns.MustExec(t, "iptables", "-D", "FORWARD", "-m", "comment", "--comment", commentFwd, "-j", chainFwd)
	mustSync(t, ctx, m, true)
	order("our jump put back")
}

func checkOnce(t *testing.T, ns *nettest.NS) {
	t.Helper()
	nat := string(ns.MustExec(t, "iptables-save", "-t", "nat"))
	filter := string(ns.MustExec(t, "iptables-save", "-t", "filter"))
	if strings.Count(nat, "-j "+chainMasq) != 1 || strings.Count(filter, "-j "+chainFwd) != 1 ||
		strings.Count(nat, "-A "+chainMasq+" ") != 6 || strings.Count(filter, "-A "+chainFwd+" ") != 2 {
		t.Fatalf("rules not exactly once:\n%s\n%s", nat, filter)
	}
}

func mustSync(t *testing.T, ctx context.Context, m masquerader, wantChange bool) {
	t.Helper()
	changed, err := m.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if changed != wantChange {
		t.Fatalf("Sync changed=%v, want %v", changed, wantChange)
	}
}

// TestMasqNFTables: the same rules as one nftables table per family,
// replaced atomically when it drifts, and removed by Cleanup.
func TestMasqNFTables(t *testing.T) {
	ns := nettest.New(t)
	nettest.RequireTool(t, "nft")
	ctx := t.Context()
	fams := append(testMasqFamilies, masqFamily{network: netip.MustParsePrefix("fd00:10:244::/56"), subnet: netip.MustParsePrefix("fd00:10:244:3::/64")})
	m := newNFTMasq(Netns(ns.Name()), fams)
	mustSync(t, ctx, m, true)
	mustSync(t, ctx, m, false)
	rs := string(ns.MustExec(t, "nft", "list", "ruleset"))
	for _, want := range []string{
		"table ip nodenet-flannel", "table ip6 nodenet-flannel",
		"type nat hook postrouting priority srcnat; policy accept;",
		"meta mark & 0x00004000 == 0x00004000 return",
		"ip saddr 10.244.3.0/24 ip daddr 10.244.0.0/16 return",
		"ip saddr != 10.244.0.0/16 ip daddr 10.244.3.0/24 return",
		"ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random",
		"ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random",
		"ip6 saddr fd00:10:244::/56 ip6 daddr != ff00::/8 masquerade fully-random",
		"type filter hook forward priority filter; policy accept;",
		"ip saddr 10.244.0.0/16 accept",
	} {
		if !strings.Contains(rs, want) {
			t.Fatalf("ruleset lacks %q:\n%s", want, rs)
		}
	}
	before := string(ns.MustExec(t, "nft", "list", "table", "ip", nftTable))
	ns.MustExec(t, "nft", "flush", "chain", "ip", nftTable, "forward")
	mustSync(t, ctx, m, true)
	if after := string(ns.MustExec(t, "nft", "list", "table", "ip", nftTable)); after != before {
		t.Fatalf("repair differs:\n%s\nwant:\n%s", after, before)
	}
	// Switching backends: the iptables side cleans nothing it does not
	// own, and nft Cleanup removes both tables.
	if _, err := newIPTablesMasq(detectIPTables(Netns(ns.Name()), testapi.Logger()), testMasqFamilies).Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if rs := string(ns.MustExec(t, "nft", "list", "ruleset")); strings.Contains(rs, nftTable) {
		t.Fatalf("cleanup left:\n%s", rs)
	}
}
