package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
	for _, s := range strings.Split(*flagProxyScales, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			b.Fatalf("-nodenet.proxy.services: %v", err)
		}
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			for range b.N {
				runProxyNFTablesBench(b, n)
			}
		})
	}
}

func childMaxRSS() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // kB → MiB
}

func runProxyNFTablesBench(b *testing.B, n int) {
	ctx := context.Background()
	topo := newProxyBenchTopology(b)
	runner := nftables.ExecRunner{Netns: topo.node.Name()}
	newProxy := func() *proxy.Proxy {
		p, err := proxy.New(proxy.Config{
			NodeName:     "bench-node",
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		}, map[proxy.Family]proxy.DataPlane{proxy.IPv4: nftables.New(proxy.IPv4, runner, nil)})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			p.Tracker().SetService(benchService(i))
			p.Tracker().SetEndpointSlice(benchSlice(i, "1", addrN(benchEPBase, 2*i+1), addrN(benchEPBase, 2*i+2)))
		}
		return p
	}

	// Cold full sync.
	p := newProxy()
	runtime.GC()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset VmHWM
	start := time.Now()
	if err := p.SyncNow(ctx, true); err != nil {
		b.Fatalf("full sync: %v", err)
	}
	fullSync := time.Since(start)
	peakRSS := procStatus("VmHWM")
	nftRSS := childMaxRSS()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap := float64(ms.HeapInuse) / (1 << 20)
	rules := metricGauge(p, "nodenet_proxy_rules_programmed")

	// A restarted proxy converging on the table already there.
	p = newProxy()
	start = time.Now()
	if err := p.SyncNow(ctx, false); err != nil {
		b.Fatalf("restart sync: %v", err)
	}
	restartSync := time.Since(start)

	// The floor of the CLI: one nft process that needs no ruleset cache.
	var floor []time.Duration
	for range 20 {
		start := time.Now()
		if err := runner.Apply(ctx, []byte("add table ip "+nftables.TableName+"\n")); err != nil {
			b.Fatal(err)
		}
		floor = append(floor, time.Since(start))
	}

	// One EndpointSlice change at a time → committed to the kernel.
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	var changes []time.Duration
	for k := range *flagProxyChanges {
		i := rng.IntN(n)
		sl := benchSlice(i, strconv.Itoa(k+2), addrN(benchEPBase, 2*i+1), addrN(benchEPBase, 2*n+k+1))
		start := time.Now()
		p.Tracker().SetEndpointSlice(sl)
		if err := p.SyncNow(ctx, false); err != nil {
			b.Fatalf("partial sync: %v", err)
		}
		changes = append(changes, time.Since(start))
	}

	// A change in the endpoint count rewrites the service's rule (nft CLI,
	// chain re-validation): measured separately, one scale-up at a time.
	var scales []time.Duration
	for k := range *flagProxyChanges / 2 {
		i := rng.IntN(n)
		sl := benchSlice(i, strconv.Itoa(*flagProxyChanges+k+2), addrN(benchEPBase, 2*i+1), addrN(benchEPBase, 2*i+2), addrN(benchEPBase, 2*n+*flagProxyChanges+k+1))
		start := time.Now()
		p.Tracker().SetEndpointSlice(sl)
		if err := p.SyncNow(ctx, false); err != nil {
			b.Fatalf("partial sync (scale): %v", err)
		}
		scales = append(scales, time.Since(start))
	}

	// First-packet latency: new TCP connections to random ClusterIPs.
	var connects []time.Duration
	failures := 0
	for range *flagProxyConnects {
		vip := addrN(benchVIPBase, rng.IntN(n)+1)
		var d time.Duration
		err := topo.client.Do(func() error {
			start := time.Now()
			c, err := net.DialTimeout("tcp", net.JoinHostPort(vip.String(), "80"), 3*time.Second)
			d = time.Since(start)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			failures++
			continue
		}
		connects = append(connects, d)
	}
	if failures > 0 {
		b.Errorf("%d of %d connects through ClusterIPs failed", failures, *flagProxyConnects)
	}
	ch, sc, co, fl := Summarize(changes), Summarize(scales), Summarize(connects), Summarize(floor)
	b.ReportMetric(fullSync.Seconds(), "full-sync-s")
	b.ReportMetric(restartSync.Seconds(), "restart-sync-s")
	b.ReportMetric(heap, "heap-MiB")
	b.ReportMetric(peakRSS, "peak-rss-MiB")
	b.ReportMetric(nftRSS, "nft-peak-rss-MiB")
	b.ReportMetric(rules, "rules")
	b.ReportMetric(Ms(ch.P50), "change-p50-ms")
	b.ReportMetric(Ms(ch.P99), "change-p99-ms")
	b.ReportMetric(Ms(sc.P50), "scale-p50-ms")
	b.ReportMetric(Ms(sc.P99), "scale-p99-ms")
	b.ReportMetric(Ms(fl.P50), "nft-floor-p50-ms")
	b.ReportMetric(Ms(co.P50), "connect-p50-ms")
	b.ReportMetric(Ms(co.P99), "connect-p99-ms")
	b.Logf("%d services (nftables): full sync %v, restart sync %v, heap %.1f MiB, peak RSS %.1f MiB (nft child %.1f MiB), %v rules+elements; change→kernel %v; endpoint count change→kernel %v; bare nft %v; connect %v",
		n, fullSync.Round(time.Millisecond), restartSync.Round(time.Millisecond), heap, peakRSS, nftRSS, rules, ch, sc, fl, co)
}
