package ipvs

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	cebpf "github.com/cilium/ebpf"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/ebpf"
	"github.com/nodenet/nodenet/proxy/ipvs/vmtest"
	"github.com/nodenet/nodenet/proxy/proxytest"
	"github.com/nodenet/nodenet/proxy/proxytest/modes"
)

// TestInVMModeSwitch runs the mode-switch and ownership tests in the VM
// (the host's kernel has no IPVS, so cmd/nodenet's switch tests cannot
// include the ipvs mode); -short skips it.
func TestInVMModeSwitch(t *testing.T) {
	nettest.SkipShort(t, "the ipvs mode-switch tests in a VM")
	vmtest.RunPackage(t, "^TestKernel(ModeSwitch|EBPFCleanup|Ownership)$", vmModules...)
}

// ipvsMode is this data plane as proxytest.SwitchSuite sees it.
func ipvsMode() proxytest.Mode {
	return proxytest.Mode{
		Name: "ipvs",
		New: func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
			return openProxier(t, node, f)
		},
		Leftovers: func(t testing.TB, node *nettest.NS) string {
			h, err := Open(node.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			return leftovers(context.Background(), h, NetHost{Netns: node.Path()})
		},
	}
}

// openProxier is the ipvs data plane in node, its handle closed at the
// test's end.
func openProxier(t testing.TB, node *nettest.NS, f proxy.Family) *Proxier {
	h, err := Open(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return New(f, h, NetHost{Netns: node.Path()}, Config{}, testapi.Logger())
}

// TestKernelModeSwitch switches ipvs → iptables → nftables → ipvs through
// the API server: each mode's Cleanup leaves none of its state (virtual
// servers, nodenet-ipvs0, the nodenet-ipvs table; NODENET chains; the
// nodenet-proxy table) and a ClusterIP answers under every mode.
func TestKernelModeSwitch(t *testing.T) {
	requireGuest(t)
	proxytest.SwitchSuite(t, ipvsMode(), modes.IPTables(), modes.NFTables())
}

// TestKernelEBPFCleanup: the ebpf data plane needs a newer kernel than the
// VM's 6.1, so it is not started here, but its Cleanup (which an ipvs
// proxy runs at start, after a switch from ebpf) must work on that kernel:
// it removes a pinned map from its pin directory without an error and
// without touching the ipvs mode's state; the ipvs Cleanup that follows
// (what starting the ebpf mode runs) leaves nothing.
func TestKernelEBPFCleanup(t *testing.T) {
	requireGuest(t)
	ctx := context.Background()
	node := nettest.New(t)
	p := openProxier(t, node, proxy.IPv4)
	snap := proxytest.Snapshot(proxy.IPv4, webPort(proxytest.WithEndpoints(8080, "10.244.1.2", "10.244.2.2")))
	if _, err := p.Sync(ctx, snap, proxytest.Full); err != nil {
		t.Fatal(err)
	}
	pins := ebpf.FamilyPinDir(nettest.BPFFS(t), proxy.IPv4)
	if err := os.MkdirAll(pins, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := cebpf.NewMap(&cebpf.MapSpec{Type: cebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pinned := filepath.Join(pins, "services")
	if err := m.Pin(pinned); err != nil {
		t.Fatal(err)
	}
	eb := ebpf.New(ebpf.Config{Family: proxy.IPv4, PinDir: pins, NetNS: node.Path(), Log: testapi.Logger()})
	if err := eb.Cleanup(ctx); err != nil {
		t.Fatalf("ebpf Cleanup on this kernel: %v", err)
	}
	if _, err := os.Stat(pinned); !os.IsNotExist(err) {
		t.Fatalf("ebpf Cleanup left its pinned map: %v", err)
	}
	svcs, err := p.ipvs.Services()
	if err != nil || len(svcs) != 1 {
		t.Fatalf("ipvs virtual servers after the ebpf Cleanup: %+v %v", svcs, err)
	}
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(ctx, p.ipvs, NetHost{Netns: node.Path()}); left != "" {
		t.Fatalf("cleanup left: %s", left)
	}
}
