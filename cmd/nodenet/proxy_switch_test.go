package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/ebpf"
	"github.com/nodenet/nodenet/proxy/proxytest"
	"github.com/nodenet/nodenet/proxy/proxytest/modes"
)

// The --proxy-mode switch lives here, above the data planes, so the
// iptables ↔ nftables switch is tested here too: each mode must leave no
// state of the other behind, and a ClusterIP keeps working across switches.
func TestProxyModeSwitchIPTablesNFTables(t *testing.T) {
	nettest.SkipShort(t, "switches proxy modes in the kernel")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	nettest.RequireTool(t, "iptables-restore")
	proxytest.SwitchSuite(t, modes.IPTables(), modes.NFTables())
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
	t.Run("iptables", func(t *testing.T) { proxytest.SwitchSuite(t, modes.IPTables(), eb) })
	t.Run("nftables", func(t *testing.T) { proxytest.SwitchSuite(t, modes.NFTables(), eb) })
}
