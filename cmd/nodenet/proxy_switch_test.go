package main

import (
	"os/exec"
	"strings"
	"testing"

	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/iptables"
	"github.com/nodenet/nodenet/proxy/nftables"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// The --proxy-mode switch lives here, above the data planes, so the
// iptables ↔ nftables switch is tested here too: each mode must leave no
// state of the other behind, and a ClusterIP keeps working across switches.
func TestProxyModeSwitchIPTablesNFTables(t *testing.T) {
	nettest.SkipShort(t, "switches proxy modes in the kernel")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	nettest.RequireTool(t, "iptables-restore")
	in := func(node *nettest.NS) []string { return []string{"ip", "netns", "exec", node.Name()} }
	ipt := proxytest.Mode{
		Name: "iptables",
		New: func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
			return iptables.New(f, ipt.New(ipt.Prefixed(in(node)...), ipt.Family(f), ipt.NFT), testapi.Logger())
		},
		Leftovers: func(t testing.TB, node *nettest.NS) string {
			var left []string
			for _, table := range []string{"nat", "filter"} {
				out, err := exec.Command("ip", "netns", "exec", node.Name(), "iptables-save", "-t", table).CombinedOutput()
				if err != nil {
					t.Fatalf("iptables-save: %v: %s", err, out)
				}
				for _, l := range strings.Split(string(out), "\n") {
					if strings.Contains(l, iptables.Prefix) {
						left = append(left, l)
					}
				}
			}
			return strings.Join(left, "\n")
		},
	}
	nft := proxytest.Mode{
		Name: "nftables",
		New: func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
			r := &nftables.ExecRunner{Netns: node.Name()}
			t.Cleanup(func() { r.Close() })
			return nftables.New(f, r, testapi.Logger())
		},
		Leftovers: func(t testing.TB, node *nettest.NS) string {
			out, err := exec.Command("ip", "netns", "exec", node.Name(), "nft", "list", "tables").CombinedOutput()
			if err != nil {
				t.Fatalf("nft list tables: %v: %s", err, out)
			}
			if strings.Contains(string(out), "nodenet-proxy") {
				return string(out)
			}
			return ""
		},
	}
	proxytest.SwitchSuite(t, ipt, nft)
}
