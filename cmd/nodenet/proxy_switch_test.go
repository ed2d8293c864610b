package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

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
			// The kernel's own answer (no bpftool needed): what is
			// attached to the cgroup at each socket hook the mode uses.
			cg, err := os.Open(cgroup)
			if err != nil {
				t.Fatal(err)
			}
			defer cg.Close()
			for _, at := range []cebpf.AttachType{cebpf.AttachCGroupInet4Connect, cebpf.AttachCGroupInet6Connect,
				cebpf.AttachCGroupUDP4Sendmsg, cebpf.AttachCGroupUDP6Sendmsg, cebpf.AttachCGroupUDP4Recvmsg,
				cebpf.AttachCGroupUDP6Recvmsg, cebpf.AttachCgroupInet4GetPeername, cebpf.AttachCgroupInet6GetPeername} {
				res, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: at})
				if err != nil {
					t.Fatalf("query the programs attached as %s: %v", at, err)
				}
				if n := len(res.Programs); n > 0 {
					left = append(left, fmt.Sprintf("%d attached as %s", n, at))
				}
			}
			return strings.Join(left, "\n")
		},
	}
	t.Run("iptables", func(t *testing.T) { proxytest.SwitchSuite(t, modes.IPTables(), eb) })
	t.Run("nftables", func(t *testing.T) { proxytest.SwitchSuite(t, modes.NFTables(), eb) })
}
