package bench

import (
	"context"
	"flag"
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

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/iptables"
)

var (
	flagProxyScales   = flag.String("nodenet.proxy.services", "1000,10000", "comma-separated ClusterIP service counts for the proxy benchmarks")
	flagProxyChanges  = flag.Int("nodenet.proxy.changes", 100, "EndpointSlice changes timed per scale")
	flagProxyConnects = flag.Int("nodenet.proxy.connects", 200, "TCP connects through ClusterIPs timed per scale")
	flagProxyVariant  = flag.String("nodenet.proxy.iptables", "nft", "iptables backend: nft or legacy")
)

// proxyBenchTopology is node + backend + client namespaces. The backend
// answers on every address of 10.244.0.0/16 (an AnyIP local route), so each
// endpoint has its own IP without adding thousands of addresses.
type proxyBenchTopology struct {
	node, backend, client *nettest.NS
}

func newProxyBenchTopology(b *testing.B) *proxyBenchTopology {
	b.Helper()
	t := &proxyBenchTopology{node: nettest.New(b), backend: nettest.New(b), client: nettest.New(b)}
	nettest.Link(b, t.node, "be0", "10.250.0.1/30", t.backend, "eth0", "10.250.0.2/30")
	nettest.Link(b, t.node, "c0", "192.168.77.1/24", t.client, "eth0", "192.168.77.2/24")
	t.node.MustExec(b, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	t.node.MustExec(b, "ip", "route", "add", "10.244.0.0/16", "via", "10.250.0.2")
	t.backend.MustExec(b, "ip", "route", "add", "local", "10.244.0.0/16", "dev", "lo")
	t.backend.MustExec(b, "ip", "route", "add", "default", "via", "10.250.0.1")
	t.client.MustExec(b, "ip", "route", "add", "default", "via", "192.168.77.1")
	var ln net.Listener
	if err := t.backend.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", ":8080")
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return t
}

func addrN(base netip.Addr, n int) netip.Addr {
	a := base.As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

var (
	benchVIPBase = netip.MustParseAddr("10.96.0.0")
	benchEPBase  = netip.MustParseAddr("10.244.0.0")
)

func benchService(i int) *corev1.Service {
	ip := addrN(benchVIPBase, i+1).String()
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i), ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

func benchSlice(i int, rv string, eps ...netip.Addr) *discoveryv1.EndpointSlice {
	name, port, proto := "http", int32(8080), corev1.ProtocolTCP
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("svc-%05d-a", i), ResourceVersion: rv,
			Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%05d", i)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	node := "elsewhere"
	for _, e := range eps {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.String()}, NodeName: &node})
	}
	return sl
}

// procStatus reads a kB field of /proc/self/status in MiB.
func procStatus(field string) float64 { return procMiB(os.Getpid(), field) }

// BenchmarkProxyIPTables: the proxy core + iptables data plane programming
// a throwaway node namespace with N ClusterIP services × 2 endpoints.
// The tracker is fed directly (what the informers would deliver), so the
// figures are the proxy's own: no API server in the process.
// Reports: full sync (cold) and restart sync (a new proxy converging on
// existing rules), Go heap in use and peak RSS of the process after the
// sync, one EndpointSlice change → iptables-restore committed (p50/p99),
// and TCP connect latency through a random ClusterIP (p50/p99).
func BenchmarkProxyIPTables(b *testing.B) {
	nettest.RequirePrivileged(b)
	forEachProxyScale(b, runProxyIPTablesBench)
}

func runProxyIPTablesBench(b *testing.B, n int) {
	ctx := context.Background()
	topo := newProxyBenchTopology(b)
	runner := ipt.New(ipt.Prefixed("ip", "netns", "exec", topo.node.Name()), ipt.IPv4, ipt.Backend(*flagProxyVariant))
	p, sy := proxySyncs(b, ctx, n, func() proxy.DataPlane { return iptables.New(proxy.IPv4, runner, nil) })
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	ch := Summarize(replaceEndpoints(b, ctx, p, n, rng))
	co := Summarize(timeConnects(b, topo, n, rng))
	reportProxyFigures(b, sy, ch, co)
	b.Logf("%d services (iptables-%s): full sync %v, restart sync %v, heap %.1f MiB, peak RSS %.1f MiB, %v rules; change→kernel %v; connect %v",
		n, *flagProxyVariant, sy.full.Round(time.Millisecond), sy.restart.Round(time.Millisecond), sy.heap, sy.peakRSS, sy.rules, ch, co)
}

// forEachProxyScale runs run(b, n) b.N times in a sub-benchmark
// "services=N" for each N of -nodenet.proxy.services.
func forEachProxyScale(b *testing.B, run func(b *testing.B, n int)) {
	for _, s := range strings.Split(*flagProxyScales, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			b.Fatalf("-nodenet.proxy.services: %v", err)
		}
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			for range b.N {
				run(b, n)
			}
		})
	}
}

// newBenchProxy is a proxy over dp whose tracker holds n services × 2
// endpoints.
func newBenchProxy(b *testing.B, n int, dp proxy.DataPlane) *proxy.Proxy {
	b.Helper()
	p, err := proxy.New(proxy.Config{
		NodeName:     "bench-node",
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
	}, map[proxy.Family]proxy.DataPlane{proxy.IPv4: dp})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		p.Tracker().SetService(benchService(i))
		p.Tracker().SetEndpointSlice(benchSlice(i, "1", addrN(benchEPBase, 2*i+1), addrN(benchEPBase, 2*i+2)))
	}
	return p
}

// proxySyncFigures are the figures of proxySyncs.
type proxySyncFigures struct {
	full, restart time.Duration
	// prepare: the data plane's start-up work (proxy.Preparer, the ebpf
	// mode's load and attach), run beside the feeding of the services
	// as a process runs it beside the informers' lists; 0 without.
	prepare       time.Duration
	fullCPU       time.Duration // CPU time of the process during the full sync
	heap, peakRSS float64       // MiB: Go heap in use, VmHWM of the process
	childRSS      float64       // MiB: the largest child (nft, iptables-restore) after the full sync
	rules         float64       // nodenet_proxy_rules_programmed after the full sync
}

// proxySyncs times a cold full sync of a new proxy with n services (and the
// memory it took), then a restarted proxy converging on what the first
// programmed; it returns the restarted proxy. newDP makes each proxy's data
// plane.
func proxySyncs(b *testing.B, ctx context.Context, n int, newDP func() proxy.DataPlane) (*proxy.Proxy, proxySyncFigures) {
	b.Helper()
	var f proxySyncFigures
	// Cold full sync.
	dp := newDP()
	prepared := prepareBeside(b, ctx, dp)
	p := newBenchProxy(b, n, dp)
	f.prepare = prepared()
	runtime.GC()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // reset VmHWM
	cpu := processCPU()
	start := time.Now()
	if err := p.SyncNow(ctx, true); err != nil {
		b.Fatalf("full sync: %v", err)
	}
	f.full = time.Since(start)
	f.fullCPU = processCPU() - cpu
	f.peakRSS = procStatus("VmHWM")
	f.childRSS = childMaxRSS()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f.heap = float64(ms.HeapInuse) / (1 << 20)
	f.rules = metricGauge(p, "nodenet_proxy_rules_programmed")

	// A restarted proxy converging on the rules already there.
	dp = newDP()
	prepared = prepareBeside(b, ctx, dp)
	p = newBenchProxy(b, n, dp)
	prepared()
	start = time.Now()
	if err := p.SyncNow(ctx, false); err != nil {
		b.Fatalf("restart sync: %v", err)
	}
	f.restart = time.Since(start)
	return p, f
}

// prepareBeside starts dp's Prepare (when it is a proxy.Preparer) and
// returns a function that waits for it and says how long it took.
func prepareBeside(b *testing.B, ctx context.Context, dp proxy.DataPlane) func() time.Duration {
	pr, ok := dp.(proxy.Preparer)
	if !ok {
		return func() time.Duration { return 0 }
	}
	done := make(chan error, 1)
	start := time.Now()
	var took time.Duration
	go func() {
		err := pr.Prepare(ctx)
		took = time.Since(start)
		done <- err
	}()
	return func() time.Duration {
		if err := <-done; err != nil {
			b.Fatalf("prepare %s data plane: %v", dp.Name(), err)
		}
		return took
	}
}

// processCPU is the user + system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func childMaxRSS() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // kB → MiB
}

// timeSliceChanges sets count EndpointSlices, slice(k) for k in [0, count),
// one at a time, and times each from the tracker update until the sync
// has committed it to the kernel; what names the sync in a failure.
func timeSliceChanges(b *testing.B, ctx context.Context, p *proxy.Proxy, count int, what string, slice func(k int) *discoveryv1.EndpointSlice) []time.Duration {
	b.Helper()
	var d []time.Duration
	for k := range count {
		sl := slice(k)
		start := time.Now()
		p.Tracker().SetEndpointSlice(sl)
		if err := p.SyncNow(ctx, false); err != nil {
			b.Fatalf("%s: %v", what, err)
		}
		d = append(d, time.Since(start))
	}
	return d
}

// replaceEndpoints times -nodenet.proxy.changes EndpointSlice changes of a
// random one of n services, each replacing its second endpoint with a new
// one (the endpoint count stays 2).
func replaceEndpoints(b *testing.B, ctx context.Context, p *proxy.Proxy, n int, rng *rand.Rand) []time.Duration {
	b.Helper()
	return timeSliceChanges(b, ctx, p, *flagProxyChanges, "partial sync", func(k int) *discoveryv1.EndpointSlice {
		i := rng.IntN(n)
		return benchSlice(i, strconv.Itoa(k+2), addrN(benchEPBase, 2*i+1), addrN(benchEPBase, 2*n+k+1))
	})
}

// timeConnects is first-packet latency: -nodenet.proxy.connects new TCP
// connections from the client namespace to random ones of n ClusterIPs.
// Failed connects are not timed but fail the benchmark.
func timeConnects(b *testing.B, topo *proxyBenchTopology, n int, rng *rand.Rand) []time.Duration {
	b.Helper()
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
	return connects
}

// reportProxyFigures reports the metrics both proxy benchmarks have.
func reportProxyFigures(b *testing.B, sy proxySyncFigures, changes, connects Latency) {
	b.ReportMetric(sy.full.Seconds(), "full-sync-s")
	b.ReportMetric(sy.fullCPU.Seconds(), "full-sync-cpu-s")
	if sy.prepare > 0 {
		b.ReportMetric(sy.prepare.Seconds(), "prepare-s")
	}
	b.ReportMetric(sy.restart.Seconds(), "restart-sync-s")
	b.ReportMetric(sy.heap, "heap-MiB")
	b.ReportMetric(sy.peakRSS, "peak-rss-MiB")
	b.ReportMetric(sy.rules, "rules")
	b.ReportMetric(Ms(changes.P50), "change-p50-ms")
	b.ReportMetric(Ms(changes.P99), "change-p99-ms")
	b.ReportMetric(Ms(connects.P50), "connect-p50-ms")
	b.ReportMetric(Ms(connects.P99), "connect-p99-ms")
}

func metricGauge(p *proxy.Proxy, name string) float64 {
	mfs, err := p.Metrics().Registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
			return sum
		}
	}
	return 0
}
