package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/ebpf"
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
	ipt, nft := iptablesMode(in), nftablesMode()
	proxytest.SwitchSuite(t, ipt, nft)
}

// TestProxyModeSwitchEBPF switches iptables ↔ ebpf and nftables ↔ ebpf in
// both directions: no chain, table, pin or attached program of the mode
// left behind survives, and a ClusterIP keeps working. The ebpf programs
// attach to a throwaway cgroup holding the test process.
func TestProxyModeSwitchEBPF(t *testing.T) {
	nettest.SkipShort(t, "switches proxy modes in the kernel")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	nettest.RequireTool(t, "iptables-restore")
	in := func(node *nettest.NS) []string { return []string{"ip", "netns", "exec", node.Name()} }
	nettest.RequireTool(t, "bpftool")
	pins, cgroup := nettest.BPFFS(t), nettest.Cgroup(t)
	eb := proxytest.Mode{
		Name: "ebpf",
		New: func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
			return ebpf.New(ebpf.Config{Family: f, Cgroup: cgroup, PinDir: ebpf.FamilyPinDir(pins, f), Log: testapi.Logger()})
		},
		Leftovers: func(t testing.TB, node *nettest.NS) string {
			var left []string
			ents, _ := os.ReadDir(pins)
			for _, e := range ents {
				// maps.debug, progs.debug: the kernel's, in every bpffs.
				if !strings.HasSuffix(e.Name(), ".debug") {
					left = append(left, "pin "+e.Name())
				}
			}
			out, err := exec.Command("bpftool", "cgroup", "show", cgroup).CombinedOutput()
			if err != nil {
				t.Fatalf("bpftool cgroup show: %v: %s", err, out)
			}
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "connect") || strings.Contains(l, "sendmsg") || strings.Contains(l, "recvmsg") || strings.Contains(l, "getpeername") {
					left = append(left, "attached "+strings.TrimSpace(l))
				}
			}
			return strings.Join(left, "\n")
		},
	}
	t.Run("iptables", func(t *testing.T) { proxytest.SwitchSuite(t, iptablesMode(in), eb) })
	t.Run("nftables", func(t *testing.T) { proxytest.SwitchSuite(t, nftablesMode(), eb) })
}

// iptablesMode is the iptables (nft variant) data plane for SwitchSuite.
func iptablesMode(in func(*nettest.NS) []string) proxytest.Mode {
	return proxytest.Mode{
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
}

// nftablesMode is the nftables data plane for SwitchSuite.
func nftablesMode() proxytest.Mode {
	return proxytest.Mode{
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
}
