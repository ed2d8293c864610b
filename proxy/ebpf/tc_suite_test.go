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
// hairpin) is translated by the tc path alone.
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
		"ExternalTrafficPolicyLocalFromInside":      nodeOwnTrafficIsSocketLB,
		"IPv6/ExternalTrafficPolicyLocalFromInside": nodeOwnTrafficIsSocketLB,
	})
}

// nodeOwnTrafficIsSocketLB: the case's last step has the node itself
// connect to the LB IP. The node's own connections are the socket
// programs' (the node's processes are in their cgroup in every real setup);
// this run leaves that cgroup empty, and a tc ingress program never sees a
// locally sent packet, so the step cannot pass here by design. The case's
// pod steps pass through the tc path (pod sources in the cluster CIDRs take
// the inside entry); TestTCPodReachesETPLocalElsewhere checks them alone.
const nodeOwnTrafficIsSocketLB = "the node's own connect to an LB IP is socket LB's, which this tc-only run leaves out (pod steps: TestTCPodReachesETPLocalElsewhere)"
