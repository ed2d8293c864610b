package bench

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Scale of the benchmarks. The defaults are the figures; every knob
// has a flag (go test ./bench -run '^$' -bench . -nodenet.n=500 ...), and
// NODENET_BENCH_SCALE (e.g. 0.01) multiplies the counts whose flag is not
// given. With -short and no NODENET_BENCH_SCALE the scale is 0.02, so
// `go test -short -bench . ./bench` is a smoke run.
var (
	flagN        = flag.Int("nodenet.n", 10000, "objects per kind (Services, EndpointSlices)")
	flagWorkers  = flag.Int("nodenet.workers", 32, "concurrent client workers for creates and updates")
	flagWatchers = flag.Int("nodenet.watchers", 100, "concurrent watchers in the fan-out scenario")
	flagUpdates  = flag.Int("nodenet.updates", 10000, "updates written in the fan-out scenario")
	flagRuns     = flag.Int("nodenet.runs", 5, "list runs per mode")
	flagPage     = flag.Int64("nodenet.page", 500, "page size (limit) of the paged list")
	flagArgs     = flag.String("nodenet.serverargs", "", "extra flags for `nodenet apiserver`, space-separated (e.g. --watch-cache-size=50000)")
)

// ScaleEnv names the environment variable that scales the benchmarks.
const ScaleEnv = "NODENET_BENCH_SCALE"

type benchScale struct {
	N, Workers, Watchers, Updates, Runs int
	PageSize                            int64
	Factor                              float64
}

func (s benchScale) String() string {
	return fmt.Sprintf("n=%d workers=%d watchers=%d updates=%d runs=%d page=%d (scale %g)",
		s.N, s.Workers, s.Watchers, s.Updates, s.Runs, s.PageSize, s.Factor)
}

func scaleFor(tb testing.TB) benchScale {
	tb.Helper()
	factor := 1.0
	if v := os.Getenv(ScaleEnv); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			tb.Fatalf("%s=%q: want a positive number", ScaleEnv, v)
		}
		factor = f
	} else if testing.Short() {
		factor = 0.02
	}
	s := benchScale{Workers: *flagWorkers, Runs: *flagRuns, PageSize: *flagPage, Factor: factor}
	s.N = s.scaled("nodenet.n", *flagN)
	s.Watchers = s.scaled("nodenet.watchers", *flagWatchers)
	s.Updates = s.scaled("nodenet.updates", *flagUpdates)
	return s
}

// scaled is v, the value of flag name, as given on the command line, or
// else v times the scale factor (at least 1).
func (s benchScale) scaled(name string, v int) int {
	if flagSet(name) {
		return v
	}
	return max(1, int(math.Round(float64(v)*s.Factor)))
}

// startServer starts a fresh server process for one benchmark or test and
// stops it (and removes its temp dir) when that ends, failed or not.
func startServer(tb testing.TB) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := StartServer(ctx, ServerOptions{ExtraArgs: strings.Fields(*flagArgs)})
	if err != nil {
		tb.Fatalf("start nodenet apiserver: %v", err)
	}
	tb.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			tb.Errorf("stop nodenet apiserver: %v", err)
		}
	})
	return srv
}

func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// apiServerBench starts an API server benchmark: its scale (logged), a
// context and a fresh server.
func apiServerBench(b *testing.B) (benchScale, context.Context, *Server) {
	b.Helper()
	sc := scaleFor(b)
	ctx := benchCtx(b)
	srv := startServer(b)
	b.Logf("scale: %v", sc)
	return sc, ctx, srv
}

// storeServices creates n Services (no EndpointSlices) in namespace ns,
// untimed, for the scenarios that read them.
func storeServices(b *testing.B, ctx context.Context, srv *Server, ns string, n, workers int) {
	b.Helper()
	if _, err := CreateObjects(ctx, srv.Client, CreateOptions{Namespace: ns, N: n, Workers: workers, SkipSlices: true}); err != nil {
		b.Fatal(err)
	}
}

// cost measures what the code between costMeter and its returned func took
// in CPU and allocation, in the server and in the harness.
type cost struct {
	Server, Harness Usage
}

func (c cost) String() string {
	return fmt.Sprintf("server CPU %.1fs, server allocated %.0f MiB; harness (client) CPU %.1fs",
		c.Server.CPU.Seconds(), c.Server.AllocBytes/(1<<20), c.Harness.CPU.Seconds())
}

// reportServer reports what every API server benchmark does about the
// server: its RSS after the run and the CPU and allocation the run cost it.
func reportServer(b *testing.B, mem Memory, c cost) {
	b.ReportMetric(MiB(mem.RSS), "rss-MiB")
	b.ReportMetric(c.Server.CPU.Seconds(), "srv-cpu-s")
	b.ReportMetric(c.Server.AllocBytes/(1<<20), "srv-alloc-MiB")
}

func costMeter(tb testing.TB, ctx context.Context, srv *Server) func() cost {
	tb.Helper()
	srv0, err := srv.Usage(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	self0 := SelfUsage()
	return func() cost {
		srv1, err := srv.Usage(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		return cost{Server: srv1.Sub(srv0), Harness: SelfUsage().Sub(self0)}
	}
}

func memory(tb testing.TB, ctx context.Context, srv *Server) Memory {
	tb.Helper()
	m, err := srv.Memory(ctx)
	if err != nil {
		tb.Fatalf("read server memory: %v", err)
	}
	return m
}

// BenchmarkAPIServerCreate: N Services then N EndpointSlices, each phase from
// -nodenet.workers concurrent creates through one client (QPS limit lifted).
func BenchmarkAPIServerCreate(b *testing.B) {
	sc, ctx, srv := apiServerBench(b)
	var res *CreateResult
	done := costMeter(b, ctx, srv)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var err error
		res, err = CreateObjects(ctx, srv.Client, CreateOptions{Namespace: fmt.Sprintf("bench-create-%d", i), N: sc.N, Workers: sc.Workers})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	spent := done()
	mem := memory(b, ctx, srv)
	b.Logf("%v", res.Services)
	b.Logf("%v", res.Slices)
	b.Logf("cost: %v", spent)
	b.Logf("server memory after creating: %v", mem)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(res.Services.PerSec, "svc/s")
	b.ReportMetric(res.Slices.PerSec, "slices/s")
	b.ReportMetric(Ms(res.Services.Latency.P50), "svc-p50-ms")
	b.ReportMetric(Ms(res.Services.Latency.P99), "svc-p99-ms")
	b.ReportMetric(Ms(res.Slices.Latency.P50), "slice-p50-ms")
	b.ReportMetric(Ms(res.Slices.Latency.P99), "slice-p99-ms")
	reportServer(b, mem, spent)
}

// BenchmarkAPIServerList: with N Services stored (created untimed), list them
// -nodenet.runs times each from etcd (resourceVersion=""), from the watch
// cache (resourceVersion="0") and paged (limit=-nodenet.page); then the
// server's memory.
func BenchmarkAPIServerList(b *testing.B) {
	sc, ctx, srv := apiServerBench(b)
	const ns = "bench-list"
	storeServices(b, ctx, srv, ns, sc.N, sc.Workers)
	before := memory(b, ctx, srv)
	var res *ListResult
	done := costMeter(b, ctx, srv)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var err error
		if res, err = ListServices(ctx, srv.Client, ListOptions{Namespace: ns, Expect: sc.N, Runs: sc.Runs, PageSize: sc.PageSize}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	spent := done()
	mem := memory(b, ctx, srv)
	for _, m := range []ListMode{res.Etcd, res.Cache, res.Paged} {
		b.Logf("%v", m)
	}
	b.Logf("cost of %d lists: %v", 3*sc.Runs*b.N, spent)
	b.Logf("server memory with %d Services, before listing: %v", sc.N, before)
	b.Logf("server memory with %d Services, after listing:  %v", sc.N, mem)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(Ms(res.Etcd.Latency.P50), "etcd-p50-ms")
	b.ReportMetric(Ms(res.Etcd.Latency.Max), "etcd-max-ms")
	b.ReportMetric(Ms(res.Cache.Latency.P50), "cache-p50-ms")
	b.ReportMetric(Ms(res.Cache.Latency.Max), "cache-max-ms")
	b.ReportMetric(Ms(res.Paged.Latency.P50), "paged-p50-ms")
	b.ReportMetric(Ms(res.Paged.Latency.Max), "paged-max-ms")
	b.ReportMetric(MiB(mem.PeakRSS), "peak-rss-MiB")
	b.ReportMetric(MiB(mem.HeapInuse), "heap-MiB")
	reportServer(b, mem, spent)
}

// BenchmarkAPIServerWatchFanout: with N Services stored (created untimed),
// -nodenet.watchers watches (each its own client and connection) receive
// -nodenet.updates annotation patches written by -nodenet.workers writers.
// Latency is from write start to receipt at each watcher.
func BenchmarkAPIServerWatchFanout(b *testing.B) {
	sc, ctx, srv := apiServerBench(b)
	const ns = "bench-watch"
	storeServices(b, ctx, srv, ns, sc.N, sc.Workers)
	targets := make([]string, sc.N)
	for i := range targets {
		targets[i] = ServiceName(i)
	}
	var res *WatchResult
	done := costMeter(b, ctx, srv)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var err error
		res, err = WatchFanout(ctx, WatchOptions{
			Namespace: ns, Targets: targets,
			Watchers: sc.Watchers, NewClient: srv.NewClient,
			Updates: sc.Updates, Writers: sc.Workers, Writer: srv.Client,
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	spent := done()
	mem := memory(b, ctx, srv)
	b.Logf("%v", res)
	for _, e := range res.WatchErrors {
		b.Logf("watch ended early: %s", e)
	}
	b.Logf("cost: %v", spent)
	b.Logf("server memory after the fan-out: %v", mem)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(Ms(res.Delivery.P50), "p50-ms")
	b.ReportMetric(Ms(res.Delivery.P99), "p99-ms")
	b.ReportMetric(Ms(res.Delivery.Max), "max-ms")
	b.ReportMetric(float64(res.Received), "events")
	b.ReportMetric(float64(res.Lost), "lost")
	b.ReportMetric(res.EventsPerSec, "events/s")
	b.ReportMetric(res.WritesPerSec, "writes/s")
	b.ReportMetric(Ms(res.WriteLatency.P50), "write-p50-ms")
	reportServer(b, mem, spent)
	if res.Lost != 0 || res.Duplicates != 0 {
		b.Errorf("lost %d events, %d duplicates", res.Lost, res.Duplicates)
	}
}
