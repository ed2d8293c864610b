package bench

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/nftables"
)

// BenchmarkProxyNFTables: the proxy core + nftables data plane programming
// a throwaway node namespace with N ClusterIP services × 2 endpoints (same
// topology, flags and feeding as BenchmarkProxyIPTables, so the figures
// compare). Reports: full sync (cold) and restart sync, Go heap in use and
// peak RSS of the proxy process and of the largest nft child, one
// EndpointSlice change → committed to the kernel (p50/p99; replacing an
// endpoint, and separately adding one), the cost of a
// bare nft invocation in the namespace (the CLI's floor), and TCP connect
// latency through a random ClusterIP (p50/p99).
func BenchmarkProxyNFTables(b *testing.B) {
	nettest.RequirePrivileged(b)
	nettest.RequireTool(b, "nft")
	forEachProxyScale(b, runProxyNFTablesBench)
}

func runProxyNFTablesBench(b *testing.B, n int) {
	ctx := context.Background()
	topo := newProxyBenchTopology(b)
	runner := &nftables.ExecRunner{Netns: topo.node.Name()}
	defer runner.Close()
	p, sy := proxySyncs(b, ctx, n, func() proxy.DataPlane { return nftables.New(proxy.IPv4, runner, nil) })

	// The floor of the CLI: one nft process that needs no ruleset cache.
	var floor []time.Duration
	for range 20 {
		start := time.Now()
		if err := runner.Apply(ctx, []byte("add table ip "+nftables.TableName+"\n")); err != nil {
			b.Fatal(err)
		}
		floor = append(floor, time.Since(start))
	}

	rng := rand.New(rand.NewPCG(uint64(n), 7))
	changes := replaceEndpoints(b, ctx, p, n, rng)
	// A change in the endpoint count rewrites the service's rule (nft CLI,
	// chain re-validation): measured separately, one scale-up at a time.
	scales := timeSliceChanges(b, ctx, p, *flagProxyChanges/2, "partial sync (scale)", func(k int) *discoveryv1.EndpointSlice {
		i := rng.IntN(n)
		return benchSlice(i, strconv.Itoa(*flagProxyChanges+k+2), addrN(benchEPBase, 2*i+1), addrN(benchEPBase, 2*i+2), addrN(benchEPBase, 2*n+*flagProxyChanges+k+1))
	})
	connects := timeConnects(b, topo, n, rng)

	ch, sc, co, fl := Summarize(changes), Summarize(scales), Summarize(connects), Summarize(floor)
	reportProxyFigures(b, sy, ch, co)
	b.ReportMetric(sy.childRSS, "nft-peak-rss-MiB")
	b.ReportMetric(Ms(sc.P50), "scale-p50-ms")
	b.ReportMetric(Ms(sc.P99), "scale-p99-ms")
	b.ReportMetric(Ms(fl.P50), "nft-floor-p50-ms")
	b.Logf("%d services (nftables): full sync %v, restart sync %v, heap %.1f MiB, peak RSS %.1f MiB (nft child %.1f MiB), %v rules+elements; change→kernel %v; endpoint count change→kernel %v; bare nft %v; connect %v",
		n, sy.full.Round(time.Millisecond), sy.restart.Round(time.Millisecond), sy.heap, sy.peakRSS, sy.childRSS, sy.rules, ch, sc, fl, co)
}
