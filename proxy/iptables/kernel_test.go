package iptables

import (
	"strings"
	"testing"

	ipt "github.com/nodenet/nodenet/internal/iptables"
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
	for _, b := range []ipt.Backend{ipt.NFT, ipt.Legacy} {
		t.Run(string(b), func(t *testing.T) {
			proxytest.KernelSuite(t, func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
				return New(f, kernelRunner(node, f, b), testapi.Logger())
			})
		})
	}
}

// iptablesMode is one iptables backend for SwitchSuite.
func iptablesMode(b ipt.Backend) proxytest.Mode {
	return proxytest.Mode{
		Name: "iptables-" + string(b),
		New: func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
			return New(f, kernelRunner(node, f, b), testapi.Logger())
		},
		Leftovers: func(t testing.TB, node *nettest.NS) string {
			var left []string
			r := kernelRunner(node, proxy.IPv4, b)
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
	proxytest.SwitchSuite(t, iptablesMode(ipt.NFT), iptablesMode(ipt.Legacy))
}

// TestKernelLeavesOtherDaemonsChains: flanneld's masquerade chain
// (NODENET-FLANNEL-MASQ, hooked from POSTROUTING) shares the proxy's
// "NODENET-" prefix; neither a full sync nor a clean-up may touch it.
func TestKernelLeavesOtherDaemonsChains(t *testing.T) {
	nettest.RequirePrivileged(t)
	node := nettest.New(t)
	r := kernelRunner(node, proxy.IPv4, ipt.NFT)
	foreign := "*nat\n:NODENET-FLANNEL-MASQ - [0:0]\n-A NODENET-FLANNEL-MASQ -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE\n-A POSTROUTING -j NODENET-FLANNEL-MASQ\nCOMMIT\n"
	if err := r.Restore(t.Context(), []byte(foreign)); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		out, err := r.Save(t.Context(), "nat")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"-A NODENET-FLANNEL-MASQ -s 10.244.0.0/16", "-A POSTROUTING -j NODENET-FLANNEL-MASQ"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("%s: %q is gone:\n%s", when, want, out)
			}
		}
	}
	dp := New(proxy.IPv4, r, testapi.Logger())
	if _, err := dp.Sync(t.Context(), proxytest.Snapshot(proxy.IPv4, proxytest.GoldenServices(proxy.IPv4)...), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	check("after a full sync")
	if err := dp.Cleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	check("after the proxy's clean-up")
	out, _ := r.Save(t.Context(), "nat")
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, ":") && Owns(strings.Fields(l[1:])[0]) {
			t.Errorf("clean-up left the proxy's chain %s", l)
		}
	}
}
