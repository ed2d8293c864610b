package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/ipvs"
	"github.com/nodenet/nodenet/proxy/ipvs/vmtest"
)

var flagProxyVMTimeout = flag.Duration("nodenet.proxy.vm-timeout", 90*time.Minute, "bound on the VM run of BenchmarkProxyIPVS (boot to power-off, every scale of both modes under TCG)")

// ipvsBenchModules are loaded in the VM before the benchmarks start.
var ipvsBenchModules = []string{"ip_vs", "ip_vs_rr", "dummy", "veth", "nf_tables", "nf_conntrack"}

// BenchmarkProxyIPVS: the ipvs mode against the nftables mode, both
// inside one VM booted from Debian's kernel (proxy/ipvs/vmtest: this
// machine's kernel has no IPVS). The host builds this package's test
// binary, boots it with BenchmarkProxyIPVS and BenchmarkProxyNFTables
// selected and the -nodenet.proxy.* flags passed on, and reads their
// result lines back. TCG emulation makes every figure several times the
// host's, so what it reports per scale (sub-benchmark services=N) is the
// ipvs mode's figures and their ratio to the nftables mode's in the same
// VM run ("…-vs-nft": 0.5 is half the nftables figure).
//
// Inside the VM it is the measurement itself, with the topology, feeding
// and figures of BenchmarkProxyNFTables: full sync (cold) and restart
// sync, one EndpointSlice change → in the kernel (p50/p99), TCP connect
// latency through a random ClusterIP (p50/p99).
func BenchmarkProxyIPVS(b *testing.B) {
	if vmtest.InGuest() {
		nettest.RequirePrivileged(b)
		nettest.RequireTool(b, "nft")
		forEachProxyScale(b, runProxyIPVSBench)
		return
	}
	figures := benchInVM(b, *flagProxyScales, *flagProxyChanges, *flagProxyConnects)
	if figures == nil {
		return
	}
	for _, s := range strings.Split(*flagProxyScales, ",") {
		scale := "services=" + strings.TrimSpace(s)
		ipvsF, nftF := figures["BenchmarkProxyIPVS/"+scale], figures["BenchmarkProxyNFTables/"+scale]
		if ipvsF == nil || nftF == nil {
			b.Fatalf("the VM reported no %s figures for both modes (ipvs %v, nftables %v)", scale, ipvsF, nftF)
		}
		b.Run(scale, func(b *testing.B) {
			for _, unit := range []string{"full-sync-s", "restart-sync-s", "change-p50-ms", "change-p99-ms", "connect-p50-ms", "connect-p99-ms"} {
				b.ReportMetric(ipvsF[unit], unit)
				if nftF[unit] > 0 {
					b.ReportMetric(ipvsF[unit]/nftF[unit], strings.TrimSuffix(strings.TrimSuffix(unit, "-s"), "-ms")+"-vs-nft")
				}
			}
			b.ReportMetric(0, "ns/op") // the VM's run is the measurement, not this loop
		})
	}
}

// benchInVM runs BenchmarkProxyIPVS and BenchmarkProxyNFTables in one
// VM at scales (comma-separated service counts) and returns their figures
// by result name ("BenchmarkProxyIPVS/services=1000") and unit; nil when
// vmtest skipped.
func benchInVM(tb testing.TB, scales string, changes, connects int) map[string]map[string]float64 {
	tb.Helper()
	res := vmtest.RunPackageArgs(tb, vmtest.Package{
		Args: []string{"-test.run", "^$", "-test.bench", "^BenchmarkProxy(IPVS|NFTables)$", "-test.benchtime", "1x",
			"-nodenet.proxy.services", scales,
			"-nodenet.proxy.changes", strconv.Itoa(changes),
			"-nodenet.proxy.connects", strconv.Itoa(connects)},
		Modules: ipvsBenchModules,
		Timeout: *flagProxyVMTimeout,
		// 10,000 services: the proxy, nft's parse of the whole ruleset
		// and the initramfs share the guest's memory.
		MemoryMB: 2048,
	})
	if res == nil {
		return nil
	}
	figures, err := parseBenchLines(res.Output)
	if err != nil {
		tb.Fatal(err)
	}
	return figures
}

// TestProxyIPVSBenchInVM is BenchmarkProxyIPVS's self-test: both modes at
// 50 services, a few changes and connects, in the VM (about a minute with
// warm caches; -short skips it), so the benchmark cannot rot unnoticed.
func TestProxyIPVSBenchInVM(t *testing.T) {
	nettest.SkipShort(t, "the ipvs benchmark's VM self-test")
	figures := benchInVM(t, "50", 5, 10)
	if figures == nil {
		return
	}
	for _, name := range []string{"BenchmarkProxyIPVS/services=50", "BenchmarkProxyNFTables/services=50"} {
		if f := figures[name]; f["full-sync-s"] <= 0 || f["change-p50-ms"] <= 0 || f["connect-p50-ms"] <= 0 {
			t.Errorf("%s: figures %v lack full sync, change or connect", name, f)
		}
	}
}

func runProxyIPVSBench(b *testing.B, n int) {
	ctx := context.Background()
	topo := newProxyBenchTopology(b)
	h, err := ipvs.Open(topo.node.Path())
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	host := ipvs.NetHost{Netns: topo.node.Path()}
	p, sy := proxySyncs(b, ctx, n, func() proxy.DataPlane { return ipvs.New(proxy.IPv4, h, host, ipvs.Config{}, testapi.Logger()) })
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	ch := Summarize(replaceEndpoints(b, ctx, p, n, rng))
	co := Summarize(timeConnects(b, topo, n, rng))
	reportProxyFigures(b, sy, ch, co)
	b.Logf("%d services (ipvs): full sync %v, restart sync %v, heap %.1f MiB, peak RSS %.1f MiB, %v virtual+real servers; change→kernel %v; connect %v",
		n, sy.full.Round(time.Millisecond), sy.restart.Round(time.Millisecond), sy.heap, sy.peakRSS, sy.rules, ch, co)
}

// parseBenchLines reads `go test -bench` result lines ("BenchmarkX/sub
// 1 2.5 full-sync-s 3 change-p50-ms …") into name → unit → value; other
// lines are skipped.
func parseBenchLines(out string) (map[string]map[string]float64, error) {
	figures := map[string]map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		// go test appends -GOMAXPROCS to the name when it is above 1.
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		m := map[string]float64{}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark line %q: %w", sc.Text(), err)
			}
			m[f[i+1]] = v
		}
		figures[name] = m
	}
	return figures, sc.Err()
}

func TestParseBenchLines(t *testing.T) {
	out := "=== RUN ...\nBenchmarkProxyIPVS/services=100-2         \t       1\t         2.5 full-sync-s\t 4 change-p50-ms\n" +
		"    proxy_ipvs_bench_test.go:1: 100 services (ipvs): ...\nBenchmarkProxyNFTables/services=100 1 3 full-sync-s\nPASS\n"
	got, err := parseBenchLines(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]float64{
		"BenchmarkProxyIPVS/services=100":     {"full-sync-s": 2.5, "change-p50-ms": 4},
		"BenchmarkProxyNFTables/services=100": {"full-sync-s": 3},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := parseBenchLines("BenchmarkX 1 abc unit\n"); err == nil {
		t.Fatal("a malformed value was accepted")
	}
}
