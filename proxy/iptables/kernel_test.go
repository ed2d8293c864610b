package iptables

import (
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestKernel runs the shared real-kernel suite (ClusterIP, NodePort,
// refusal, affinity, eTP Local + health check, UDP conntrack cleanup,
// hairpin over IPv4 and IPv6; bad input, restart) with iptables-nft and
// iptables-legacy, one data plane per family.
func TestKernel(t *testing.T) {
	nettest.RequirePrivileged(t)
	for _, v := range []Variant{NFT, Legacy} {
		t.Run(string(v), func(t *testing.T) {
			proxytest.KernelSuite(t, func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
				r := ExecRunner{Prefix: []string{"ip", "netns", "exec", node.Name()}, Family: f, Variant: v}
				return New(f, r, testapi.Logger())
			})
		})
	}
}

// iptablesMode is one iptables backend for SwitchSuite.
func iptablesMode(v Variant) proxytest.Mode {
	prefix := func(node *nettest.NS) []string { return []string{"ip", "netns", "exec", node.Name()} }
	return proxytest.Mode{
		Name: "iptables-" + string(v),
		New: func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
			return New(f, ExecRunner{Prefix: prefix(node), Family: f, Variant: v}, testapi.Logger())
		},
		Leftovers: func(t testing.TB, node *nettest.NS) string {
			var left []string
			r := ExecRunner{Prefix: prefix(node), Family: proxy.IPv4, Variant: v}
			for _, table := range []string{"nat", "filter"} {
				out, err := r.Save(t.Context(), table)
				if err != nil {
					t.Fatalf("save: %v", err)
				}
				for _, l := range strings.Split(string(out), "\n") {
					if strings.Contains(l, Prefix) {
						left = append(left, l)
					}
				}
			}
			return strings.Join(left, "\n")
		},
	}
}

// TestKernelSwitchBackends switches iptables-nft ↔ iptables-legacy: the
// same mechanism `nodenet proxy` uses between modes (the lead wires the
// iptables ↔ nftables pair in proxy/app once nftables lands).
func TestKernelSwitchBackends(t *testing.T) {
	nettest.RequirePrivileged(t)
	proxytest.SwitchSuite(t, iptablesMode(NFT), iptablesMode(Legacy))
}

// TestDetect: an empty namespace follows the host's alternative; once one
// backend holds our (or kubelet's) chains, that backend wins.
func TestDetect(t *testing.T) {
	ns := nettest.New(t)
	prefix := []string{"ip", "netns", "exec", ns.Name()}
	if _, err := Detect(t.Context(), prefix, proxy.IPv4); err != nil {
		t.Fatal(err)
	}
	for _, v := range []Variant{Legacy, NFT} {
		r := ExecRunner{Prefix: prefix, Family: proxy.IPv4, Variant: v}
		if err := r.Restore(t.Context(), []byte("*nat\n:NODENET-SERVICES - [0:0]\nCOMMIT\n")); err != nil {
			t.Fatal(err)
		}
		other := ExecRunner{Prefix: prefix, Family: proxy.IPv4, Variant: map[Variant]Variant{NFT: Legacy, Legacy: NFT}[v]}
		if err := New(proxy.IPv4, other, nil).Cleanup(t.Context()); err != nil {
			t.Fatal(err)
		}
		got, err := Detect(t.Context(), prefix, proxy.IPv4)
		if err != nil || got != v {
			t.Errorf("with rules in %s: detected %s, %v", v, got, err)
		}
	}
}
