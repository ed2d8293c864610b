package bench

import (
	"path/filepath"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/ebpf"
)

// BenchmarkProxyEBPFTC: the ebpf data plane's tc path, same topology and
// feeding as BenchmarkProxyNFTables: the socket programs sit on an empty
// cgroup, so the client's connects reach the node as packets and the TCX
// program on the node's client-facing veth translates them (DNAT and SNAT
// set up in the kernel's conntrack). The connect figures are then "TCP
// connect through the node from another host" for the tc path, to compare
// with the nftables mode's in the same run.
func BenchmarkProxyEBPFTC(b *testing.B) {
	nettest.RequirePrivileged(b)
	nettest.RequireTool(b, "nft")
	forEachProxyScale(b, runProxyEBPFTCBench)
}

func runProxyEBPFTCBench(b *testing.B, n int) {
	runEBPFBench(b, n, "ebpf tc", func(topo *proxyBenchTopology) ebpf.Config {
		return ebpf.Config{Family: proxy.IPv4, Cgroup: nettest.EmptyCgroup(b), PinDir: filepath.Join(nettest.BPFFS(b), "ipv4"),
			Interfaces: []string{"c0"}, NetNS: topo.node.Path()}
	})
}
