// Package modes holds the iptables and nftables data planes as
// proxytest.SwitchSuite sees them (a constructor in a node namespace and a
// look for their leftovers), for the switch tests of the packages above
// them: cmd/nodenet on the host and proxy/ipvs inside its VM. It lives
// apart from proxytest because those data planes' own tests import
// proxytest.
package modes

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

// inNode runs a command in node's namespace.
func inNode(node *nettest.NS, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", node.Name()}, args...)...)
}

// IPTables is the iptables (nft variant) data plane; its leftovers are
// rules or chains with the mode's prefix in the nat and filter tables.
func IPTables() proxytest.Mode {
	return proxytest.Mode{
		Name: "iptables",
		New: func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
			in := ipt.Prefixed("ip", "netns", "exec", node.Name())
			return iptables.New(f, ipt.New(in, ipt.Family(f), ipt.NFT), testapi.Logger())
		},
		Leftovers: func(t testing.TB, node *nettest.NS) string {
			var left []string
			for _, table := range []string{"nat", "filter"} {
				out, err := inNode(node, "iptables-save", "-t", table).CombinedOutput()
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
}

// NFTables is the nftables data plane; its leftover is its table.
func NFTables() proxytest.Mode {
	return proxytest.Mode{
		Name: "nftables",
		New: func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
			r := &nftables.ExecRunner{Netns: node.Name()}
			t.Cleanup(func() { r.Close() })
			return nftables.New(f, r, testapi.Logger())
		},
		Leftovers: func(t testing.TB, node *nettest.NS) string {
			out, err := inNode(node, "nft", "list", "tables").CombinedOutput()
			if err != nil {
				t.Fatalf("nft list tables: %v: %s", err, out)
			}
			if strings.Contains(string(out), "nodenet-proxy") {
				return string(out)
			}
			return ""
		},
	}
}
