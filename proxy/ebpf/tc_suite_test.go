package ebpf

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestKernelSuiteThroughTC runs the shared real-kernel suite with nothing
// in the socket programs' cgroup and the tc program on all of the node's
// interfaces: every case's traffic (the client's, and the pods' own for
// hairpin) is translated by the tc path alone. It waits for the mode's
// fix of eTP Local from inside the cluster (waitingForInsideETPLocal).
func TestKernelSuiteThroughTC(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.SkipShort(t, "the real-kernel suite through the tc path")
	nettest.RequireTool(t, "nft")
	pins, cgroup := nettest.BPFFS(t), nettest.EmptyCgroup(t)
	var node *nettest.NS
	dp := func(f proxy.Family) *DataPlane {
		return New(Config{Family: f, Cgroup: cgroup, PinDir: filepath.Join(pins, familyDir(f)), Log: testapi.Logger(),
			Interfaces: []string{"c0", "p1", "p2"}, NetNS: node.Path()})
	}
	t.Cleanup(func() {
		for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
			if err := dp(f).Cleanup(context.Background()); err != nil {
				t.Errorf("cleanup %s: %v", f, err)
			}
		}
	})
	proxytest.KernelSuiteWaiting(t, func(t testing.TB, n *nettest.NS, f proxy.Family) proxy.DataPlane {
		node = n
		return dp(f)
	}, map[string]string{
		"ExternalTrafficPolicyLocalFromInside":      waitingForInsideETPLocal,
		"IPv6/ExternalTrafficPolicyLocalFromInside": waitingForInsideETPLocal,
	})
}
