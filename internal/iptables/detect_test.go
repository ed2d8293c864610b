package iptables

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

func TestMain(m *testing.M) { os.Exit(nettest.CheckNoLeaks(m)) }

// TestChoose is the decision table: hint chains first, then the number of
// rules, then the host's alternative.
func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name        string
		legacy, nft holdings
		alt, want   Backend
	}{
		{"both empty: alternative nft", holdings{}, holdings{}, NFT, NFT},
		{"both empty: alternative legacy", holdings{}, holdings{}, Legacy, Legacy},
		{"legacy has rules", holdings{rules: 3}, holdings{}, NFT, Legacy},
		{"nft has more rules", holdings{rules: 3}, holdings{rules: 4}, Legacy, NFT},
		{"nft hint beats legacy rules", holdings{rules: 300}, holdings{hint: true}, Legacy, NFT},
		{"legacy hint beats nft rules", holdings{hint: true}, holdings{rules: 300}, NFT, Legacy},
		{"hints in both: more rules", holdings{hint: true, rules: 2}, holdings{hint: true, rules: 1}, NFT, Legacy},
		{"hints in both, tie: alternative", holdings{hint: true, rules: 2}, holdings{hint: true, rules: 2}, Legacy, Legacy},
	} {
		asked := false
		got := choose(tc.legacy, tc.nft, func() Backend { asked = true; return tc.alt })
		if got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
		if tie := tc.legacy == tc.nft; asked != tie {
			t.Errorf("%s: alternative asked = %v on tie = %v", tc.name, asked, tie)
		}
	}
}

// TestDetectCost: on a host without legacy rules whose iptables is nft,
// detection reads the (small) legacy dump and the version, never the nft
// dump; a missing backend counts as empty; no backend at all is an error.
func TestDetectCost(t *testing.T) {
	ctx := context.Background()
	version := func(v string) answer { return answer{stdout: "iptables v1.8.9 (" + v + ")\n"} }
	legacyRules := answer{stdout: "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\nCOMMIT\n"}
	nftHint := answer{stdout: "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"}
	for _, tc := range []struct {
		name    string
		answers map[string]answer
		want    Backend
		calls   []string
	}{
		{"nft host", map[string]answer{"iptables-legacy-save": {}, "iptables": version("nf_tables"), "iptables-nft-save": nftHint},
			NFT, []string{"iptables-legacy-save", "iptables"}},
		{"legacy alternative, empty", map[string]answer{"iptables-legacy-save": {}, "iptables": version("legacy"), "iptables-nft-save": {}},
			Legacy, []string{"iptables-legacy-save", "iptables", "iptables-nft-save"}},
		{"legacy alternative, nft hint", map[string]answer{"iptables-legacy-save": {}, "iptables": version("legacy"), "iptables-nft-save": nftHint},
			NFT, []string{"iptables-legacy-save", "iptables", "iptables-nft-save"}},
		{"legacy rules", map[string]answer{"iptables-legacy-save": legacyRules, "iptables": version("nf_tables"), "iptables-nft-save": {}},
			Legacy, []string{"iptables-legacy-save", "iptables-nft-save"}},
		{"no legacy tools", map[string]answer{"iptables-nft-save": {}},
			NFT, []string{"iptables-legacy-save", "iptables-nft-save"}},
		{"no nft tools", map[string]answer{"iptables-legacy-save": {}, "iptables": version("legacy")},
			Legacy, []string{"iptables-legacy-save", "iptables", "iptables-nft-save"}},
	} {
		s := &script{answers: tc.answers}
		got, err := Detect(ctx, s.exec, IPv4)
		var progs []string
		for _, c := range s.calls {
			progs = append(progs, c[0])
		}
		if err != nil || got != tc.want || !slices.Equal(progs, tc.calls) {
			t.Errorf("%s: got %s, %v after %q; want %s after %q", tc.name, got, err, progs, tc.want, tc.calls)
		}
	}
	if _, err := Detect(ctx, (&script{}).exec, IPv6); err == nil || !strings.Contains(err.Error(), "ip6tables-legacy-save") {
		t.Errorf("without any tools: %v", err)
	}
}

// requireBackends gates on both backends' tools of one family.
func requireBackends(t *testing.T, family Family) {
	t.Helper()
	for _, b := range []Backend{NFT, Legacy} {
		for _, tool := range []string{"", "save", "restore"} {
			nettest.RequireTool(t, binary(family, b, tool))
		}
	}
}

// inNS runs commands in ns.
func inNS(ns *nettest.NS) Exec { return Prefixed("ip", "netns", "exec", ns.Name()) }

// TestDetectKernel: in a throwaway namespace, an empty firewall follows the
// host's alternative; rules in iptables-legacy make it legacy; our chains
// in iptables-nft then make it nft again (a hint beats a rule count).
func TestDetectKernel(t *testing.T) {
	for _, fam := range []Family{IPv4, IPv6} {
		t.Run(fam.String(), func(t *testing.T) {
			requireBackends(t, fam)
			ns := nettest.New(t)
			ctx := t.Context()
			detect := func() Backend {
				t.Helper()
				b, err := Detect(ctx, inNS(ns), fam)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			if got, want := detect(), alternative(ctx, inNS(ns), fam); got != want {
				t.Errorf("empty namespace: detected %s, the alternative is %s", got, want)
			}
			legacy := New(inNS(ns), fam, Legacy)
			if err := legacy.Restore(ctx, []byte("*filter\n-A INPUT -j ACCEPT\n-A OUTPUT -j ACCEPT\nCOMMIT\n")); err != nil {
				t.Fatal(err)
			}
			if got := detect(); got != Legacy {
				t.Errorf("with rules in iptables-legacy: detected %s", got)
			}
			if err := New(inNS(ns), fam, NFT).Restore(ctx, []byte("*nat\n:NODENET-HINT - [0:0]\nCOMMIT\n")); err != nil {
				t.Fatal(err)
			}
			if got := detect(); got != NFT {
				t.Errorf("with our chain in iptables-nft: detected %s", got)
			}
			r, err := Open(ctx, inNS(ns), fam)
			if err != nil || r.Backend() != NFT || r.Family() != fam {
				t.Errorf("Open: %v, %v", r, err)
			}
		})
	}
}
