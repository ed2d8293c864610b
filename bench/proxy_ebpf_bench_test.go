package bench

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/ebpf"
)

// BenchmarkProxyEBPF: the proxy core + the ebpf data plane (socket-level
// load balancing) with N ClusterIP services × 2 endpoints, same topology,
// flags and feeding as BenchmarkProxyIPTables/NFTables so the figures
// compare. The programs attach to a throwaway cgroup holding the benchmark
// process, whose client-namespace sockets are the ones translated; pins go
// to a private bpffs. Reports: prepare (load and attach: proxy.Preparer,
// which a process runs beside the informers' initial lists, so the
// benchmark runs it beside feeding the services), the cold full sync
// after it (every map write; wall and CPU time) and restart sync (a new process re-opening the pinned maps and links,
// reading the maps back), Go heap and peak RSS, one EndpointSlice change →
// in the maps (p50/p99), and TCP connect latency through a random
// ClusterIP (p50/p99).
func BenchmarkProxyEBPF(b *testing.B) {
	nettest.RequirePrivileged(b)
	forEachProxyScale(b, runProxyEBPFBench)
}

func runProxyEBPFBench(b *testing.B, n int) {
	runEBPFBench(b, n, "ebpf", func(*proxyBenchTopology) ebpf.Config {
		return ebpf.Config{Family: proxy.IPv4, Cgroup: nettest.Cgroup(b), PinDir: filepath.Join(nettest.BPFFS(b), "ipv4")}
	})
}

// runEBPFBench runs one scale of an ebpf benchmark with the data plane
// config that config builds for the topology; mode labels the log line.
func runEBPFBench(b *testing.B, n int, mode string, config func(*proxyBenchTopology) ebpf.Config) {
	ctx := context.Background()
	topo := newProxyBenchTopology(b)
	cfg := config(topo)
	defer func() {
		if err := ebpf.New(cfg).Cleanup(ctx); err != nil {
			b.Error(err)
		}
	}()
	p, sy := proxySyncs(b, ctx, n, func() proxy.DataPlane { return ebpf.New(cfg) })
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	ch := Summarize(replaceEndpoints(b, ctx, p, n, rng))
	co := Summarize(timeConnects(b, topo, n, rng))
	reportProxyFigures(b, sy, ch, co)
	b.Logf("%d services (%s): prepare %v, full sync %v (CPU %v), restart sync %v, heap %.1f MiB, peak RSS %.1f MiB, %v map entries; change→maps %v; connect %v",
		n, mode, sy.prepare.Round(time.Millisecond), sy.full.Round(time.Millisecond), sy.fullCPU.Round(time.Millisecond), sy.restart.Round(time.Millisecond), sy.heap, sy.peakRSS, sy.rules, ch, co)
}
