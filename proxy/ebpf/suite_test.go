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

// waitingForTC are the shared suite's cases about traffic from other
// hosts, which this socket-LB run cannot pass honestly: the suite's client
// namespace stands for another host, but its sockets are the test
// process's, which sits in the cgroup the socket programs are attached to,
// so socket LB would answer them and prove nothing. They run, and pass,
// through the tc path in TestKernelSuiteThroughTC (tc_suite_test.go).
var waitingForTC = map[string]string{
	"NodePortFromAnotherNamespace":      "NodePort from another host needs the tc path",
	"ExternalTrafficPolicyLocal":        "eTP Local from another host needs the tc path",
	"IPv6/NodePortFromAnotherNamespace": "NodePort from another host needs the tc path",
	"IPv6/ExternalTrafficPolicyLocal":   "eTP Local from another host needs the tc path",
}

// TestKernelSuite runs proxytest's shared real-kernel suite, case for case
// with the iptables and nftables modes, with the socket programs on a
// throwaway cgroup holding the test process and the pins on a throwaway
// bpffs.
func TestKernelSuite(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.SkipShort(t, "the real-kernel data-plane suite")
	pins, cgroup := nettest.BPFFS(t), nettest.Cgroup(t)
	// The node namespace's addresses are where wildcard NodePorts answer.
	newDP := func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
		cfg := Config{Family: f, Cgroup: cgroup, PinDir: filepath.Join(pins, familyDir(f)), Log: testapi.Logger()}
		if node != nil {
			cfg.NetNS = node.Path()
		}
		return New(cfg)
	}
	t.Cleanup(func() {
		for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
			if err := newDP(t, nil, f).Cleanup(context.Background()); err != nil {
				t.Errorf("cleanup %s: %v", f, err)
			}
		}
	})
	proxytest.KernelSuiteWaiting(t, newDP, waitingForTC)
}
