package nftables

import (
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestKernel runs the shared real-kernel suite (ClusterIP, NodePort,
// refusal, affinity, eTP Local + health check, UDP conntrack cleanup,
// hairpin, bad input, restart) against nft in throwaway namespaces.
func TestKernel(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	proxytest.KernelSuite(t, func(t testing.TB, node *nettest.NS) proxy.DataPlane {
		return New(proxy.IPv4, ExecRunner{Netns: node.Name()}, testapi.Logger())
	})
}
