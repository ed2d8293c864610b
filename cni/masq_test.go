package cni

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/iptables/iptablestest"
)

// TestMasqRules: against the iptables Fake, the first ADD writes the
// network's chain, its rules and the jump in one restore; later ADDs only
// look; a half-written chain is completed without duplicates; each network
// has its own chain.
func TestMasqRules(t *testing.T) {
	ctx := t.Context()
	f := iptables.NewFake()
	subnet := netip.MustParsePrefix("10.244.1.0/24")
	chain := masqChain("cbr0")
	if err := ensureMasqSubnet(ctx, f, "cbr0", subnet); err != nil {
		t.Fatal(err)
	}
	want := []string{"-d 10.244.1.0/24 -j RETURN", "! -d 224.0.0.0/4 -j MASQUERADE"}
	jump := `-s 10.244.1.0/24 -m comment --comment "nodenet-cni cbr0" -j ` + chain
	check := func(what string) {
		t.Helper()
		if got := f.Rules("nat", chain); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s: chain %q, want %q", what, got, want)
		}
		if got := f.Rules("nat", "POSTROUTING"); len(got) != 1 || got[0] != jump {
			t.Fatalf("%s: POSTROUTING %q, want [%q]", what, got, jump)
		}
	}
	check("first ADD")
	if f.Restores != 1 {
		t.Fatalf("first ADD: %d restores, want 1", f.Restores)
	}
	if err := ensureMasqSubnet(ctx, f, "cbr0", subnet); err != nil {
		t.Fatal(err)
	}
	if f.Restores != 1 {
		t.Fatal("a steady-state ADD wrote")
	}
	// Half-written (say, by an older plugin interrupted): the jump and one
	// rule are missing.
	if err := f.Restore(ctx, []byte("*nat\n-D POSTROUTING "+jump+"\n-D "+chain+" "+want[1]+"\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	if err := ensureMasqSubnet(ctx, f, "cbr0", subnet); err != nil {
		t.Fatal(err)
	}
	check("completed")
	if err := ensureMasqSubnet(ctx, f, "other", netip.MustParsePrefix("10.245.1.0/24")); err != nil {
		t.Fatal(err)
	}
	if got := f.Rules("nat", masqChain("other")); len(got) != 2 || got[0] != "-d 10.245.1.0/24 -j RETURN" {
		t.Fatalf("second network's chain: %q", got)
	}
	if got := f.Rules("nat", "POSTROUTING"); len(got) != 2 || got[0] != jump {
		t.Fatalf("POSTROUTING after a second network: %q", got)
	}
	if got := f.Rules("nat", chain); len(got) != 2 {
		t.Fatalf("the first network's chain changed: %q", got)
	}
}

// TestMasqFollowsLegacy: on a node whose rules live in iptables-legacy
// (here one rule per family in a throwaway namespace), ipMasq programs
// iptables-legacy, in both families, and nothing in iptables-nft.
func TestMasqFollowsLegacy(t *testing.T) {
	ns := iptablestest.LegacyNode(t)
	subnets := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}
	exec := iptables.Prefixed("ip", "netns", "exec", ns.Name())
	for range 2 {
		if err := masquerade(t.Context(), exec, "cbr0", subnets); err != nil {
			t.Fatal(err)
		}
	}
	chain := masqChain("cbr0")
	for _, tc := range []struct{ prefix, subnet, multicast string }{
		{"iptables", "10.244.1.0/24", "224.0.0.0/4"},
		{"ip6tables", "fd00:10:244:1::/64", "ff00::/8"},
	} {
		legacy := string(ns.MustExec(t, tc.prefix+"-legacy-save", "-t", "nat"))
		for _, want := range []string{
			"-A POSTROUTING -s " + tc.subnet + ` -m comment --comment "nodenet-cni cbr0" -j ` + chain,
			"-A " + chain + " -d " + tc.subnet + " -j RETURN",
			"-A " + chain + " ! -d " + tc.multicast + " -j MASQUERADE",
		} {
			if strings.Count(legacy, want+"\n") != 1 {
				t.Errorf("%s-legacy: want exactly one %q in:\n%s", tc.prefix, want, legacy)
			}
		}
		if nft := string(ns.MustExec(t, tc.prefix+"-nft-save")); strings.Contains(nft, chain) {
			t.Errorf("%s-nft got rules too:\n%s", tc.prefix, nft)
		}
	}
}
