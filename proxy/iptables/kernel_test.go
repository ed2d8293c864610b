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
