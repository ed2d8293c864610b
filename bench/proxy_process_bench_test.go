package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/upstream"
)

var (
	flagProxyModes = flag.String("nodenet.proxy.modes", "iptables,nftables,ebpf",
		"comma-separated proxy modes BenchmarkProxyProcess runs as processes")
	flagProxyHeapDir = flag.String("nodenet.proxy.heapdir", "",
		"BenchmarkProxyProcess: write each nodenet proxy's heap profile (go tool pprof) to this directory")
	flagProxyMultiCall = flag.Bool("nodenet.proxy.multicall", false,
		"BenchmarkProxyProcess: run `nodenet proxy` (the multi-call binary) instead of nodenet-proxy")
)

// BenchmarkProxyProcess measures the proxy as a node runs it: a
// nodenet-proxy process (the DaemonSet's binary; `nodenet proxy`, the
// multi-call binary's, with -nodenet.proxy.multicall) in its own network
// namespace, fed by client-go informers
// from a `nodenet apiserver` holding N ClusterIP Services with a 3-endpoint
// EndpointSlice each. Per mode of -nodenet.proxy.modes, then for upstream
// kube-proxy v1.37's iptables and nftables modes (skipped until `make
// upstream` has built it; internal/upstream), in the same run against the
// same server and Services, it reports start → first full sync (`kubeproxy_sync_proxy_rules_last_
// timestamp_seconds` set, which both proxies set only once every Service
// is programmed), that first sync's own duration as the process measured
// it (`full-sync-s`, from kubeproxy_sync_proxy_rules_duration_seconds,
// which both observe on every sync), the process's resident memory 5 s after that sync
// (`rss-MiB`) and its peak (`peak-rss-MiB`, VmHWM). This is the memory
// figure that compares with kube-proxy's; the in-process benchmarks' RSS
// also holds the benchmark's own objects. Last, what the programmed rules
// cost every new connection that is not to a Service (`connect-p50-µs`):
// TCP connects over the namespace's loopback, whose first packet walks the
// nat OUTPUT hook the proxy filled — the whole Service list, rule by rule,
// in the iptables modes; one lookup in nftables' maps; nothing with ebpf.
func BenchmarkProxyProcess(b *testing.B) {
	nettest.RequirePrivileged(b)
	bin := os.Getenv(BinaryEnv)
	if bin == "" {
		var err error
		if bin, err = BuildBinary(b.Context(), b.TempDir()); err != nil {
			b.Fatal(err)
		}
	}
	proxyCmd := []string{bin, "proxy"}
	if !*flagProxyMultiCall {
		p, err := BuildProxyBinary(b.Context(), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		proxyCmd = []string{p}
	}
	for _, s := range strings.Split(*flagProxyScales, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			b.Fatalf("-nodenet.proxy.services: %v", err)
		}
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			srv, err := StartServer(b.Context(), ServerOptions{Binary: bin})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Stop()
			if _, err := CreateObjects(b.Context(), srv.Client, CreateOptions{Namespace: "bench", N: n, Workers: 32}); err != nil {
				b.Fatal(err)
			}
			for _, p := range benchProxies(proxyCmd) {
				b.Run(p.name, func(b *testing.B) {
					for range b.N {
						runProxyProcess(b, srv, p, n)
					}
				})
			}
		})
	}
}

// benchProxy is one proxy to start: a name for the figures and its command
// line (without the per-run flags runProxyProcess adds), found when its
// sub-benchmark runs (which may skip it).
type benchProxy struct {
	name     string
	argv     func(b *testing.B) []string
	ebpf     bool // needs a throwaway cgroup and bpffs
	upstream bool
}

// benchProxies: nodenet's modes run by proxyCmd (the binary and, for the
// multi-call one, its subcommand), then upstream's.
func benchProxies(proxyCmd []string) []benchProxy {
	var out []benchProxy
	for _, m := range strings.Split(*flagProxyModes, ",") {
		m = strings.TrimSpace(m)
		out = append(out, benchProxy{name: "nodenet-" + m, ebpf: m == "ebpf",
			argv: func(*testing.B) []string { return append(slices.Clone(proxyCmd), "--proxy-mode", m) }})
	}
	for _, m := range []string{"iptables", "nftables"} {
		// No conntrack sysctl writes: the namespace's table is not the
		// node's, and the limits are global.
		out = append(out, benchProxy{name: "kube-proxy-" + m, upstream: true,
			argv: func(b *testing.B) []string {
				return []string{upstream.KubeProxy(b), "--proxy-mode", m, "--conntrack-max-per-core", "0"}
			}})
	}
	return out
}

// runProxyProcess starts p in a fresh namespace against srv, waits for its
// first full sync and reports its figures; the process and namespace go at
// the end.
func runProxyProcess(b *testing.B, srv *Server, p benchProxy, n int) {
	cmdline := p.argv(b)
	ns := nettest.New(b)
	nettest.ForwardLoopback(b, ns, strings.TrimPrefix(srv.URL, "https://"))
	// nsenter, not `ip netns exec`: that one remounts /sys, hiding the
	// cgroup v2 mount the ebpf mode attaches under.
	argv := append(append([]string{"nsenter", "--net=" + ns.Path()}, cmdline...),
		"--kubeconfig", srv.Kubeconfig, "--hostname-override", "bench-node", "--cluster-cidr", "10.128.0.0/9",
		"--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256")
	if p.ebpf {
		argv = append(argv, "--cgroup-path", nettest.EmptyCgroup(b), "--bpf-pin-dir", filepath.Join(nettest.BPFFS(b), "nodenet"))
	}
	if p.upstream {
		argv = append(argv, "--v", "0")
	} else if *flagProxyHeapDir != "" {
		argv = append(argv, "--profiling")
	}
	logPath := filepath.Join(b.TempDir(), p.name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		// What the proxy programmed goes with the namespace, or (ebpf)
		// with the throwaway bpffs and cgroup, in the test's cleanups.
	}()

	metrics := nsHTTPClient(ns)
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	for {
		v, err := scrapeGauge(ctx, metrics, "http://127.0.0.1:10249/metrics", "kubeproxy_sync_proxy_rules_last_timestamp_seconds")
		if err == nil && v > 0 {
			break
		}
		select {
		case <-exited:
			b.Fatalf("%s exited before its first sync:\n%s", p.name, FileTail(logPath, 4096))
		case <-ctx.Done():
			b.Fatalf("%s: no first sync after 10 min (last: %v):\n%s", p.name, err, FileTail(logPath, 4096))
		case <-time.After(50 * time.Millisecond):
		}
	}
	firstSync := time.Since(start)
	// The sync's own duration, as the process measured it (nodenet and
	// kube-proxy alike observe every sync in this histogram): start →
	// first sync is mostly the informers' initial lists.
	syncSum, errSum := scrapeGauge(ctx, metrics, "http://127.0.0.1:10249/metrics", "kubeproxy_sync_proxy_rules_duration_seconds_sum")
	syncCount, errCount := scrapeGauge(ctx, metrics, "http://127.0.0.1:10249/metrics", "kubeproxy_sync_proxy_rules_duration_seconds_count")
	ownSync := "unknown"
	if err := errors.Join(errSum, errCount); err != nil {
		b.Logf("%s: sync duration histogram: %v", p.name, err)
	} else if syncCount >= 1 {
		b.ReportMetric(syncSum/syncCount, "full-sync-s")
		ownSync = fmt.Sprintf("%v (mean of %v syncs)", time.Duration(syncSum/syncCount*float64(time.Second)).Round(time.Millisecond), syncCount)
	}
	time.Sleep(5 * time.Second) // what it keeps, not what the sync briefly held
	pid := cmd.Process.Pid
	rss, peak := procMiB(pid, "VmRSS"), procMiB(pid, "VmHWM")
	// Where the resident memory is: the binary's pages (RssFile: a
	// multi-call binary maps all of nodenet) and anonymous memory, of which
	// the Go heap in use is a part (not for kube-proxy: its metrics
	// endpoint has the same name and the same Go collector, so it is read
	// there too).
	heap, _ := scrapeGauge(ctx, metrics, "http://127.0.0.1:10249/metrics", "go_memstats_heap_inuse_bytes")
	if *flagProxyHeapDir != "" && !p.upstream {
		if err := saveHeapProfile(ctx, metrics, filepath.Join(*flagProxyHeapDir, fmt.Sprintf("%s-%d.heap", p.name, n))); err != nil {
			b.Error(err)
		}
	}
	connects := timeLoopbackConnects(b, ns, proxyWalkConnects)
	b.ReportMetric(firstSync.Seconds(), "first-sync-s")
	b.ReportMetric(rss, "rss-MiB")
	b.ReportMetric(peak, "peak-rss-MiB")
	b.ReportMetric(us(connects.P50), "connect-p50-µs")
	b.Logf("%d services, %s: start → first full sync %v, the sync itself %s, RSS %.1f MiB (file %.1f, anon %.1f; Go heap in use %.1f), peak RSS %.1f MiB; "+
		"a new connection beside the rules: p50 %.1fµs p99 %.1fµs (n=%d)",
		n, p.name, firstSync.Round(10*time.Millisecond), ownSync, rss, procMiB(pid, "RssFile"), procMiB(pid, "RssAnon"), heap/(1<<20), peak,
		us(connects.P50), us(connects.P99), connects.N)
}

// proxyWalkConnects is how many connections timeLoopbackConnects times.
const proxyWalkConnects = 2000

// timeLoopbackConnects times n TCP connects (each a new conntrack entry,
// so its first packet meets nat OUTPUT's rules) to a listener on the
// loopback of ns that accepts and closes, after 100 unmeasured ones.
func timeLoopbackConnects(b *testing.B, ns *nettest.NS, n int) Latency {
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		b.Fatalf("listen in %s: %v", ns.Name(), err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	var d []time.Duration
	err := ns.Do(func() error {
		d = make([]time.Duration, 0, n)
		for i := range 100 + n {
			t0 := time.Now()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			if i >= 100 {
				d = append(d, time.Since(t0))
			}
			c.Close()
		}
		return nil
	})
	if err != nil {
		b.Fatalf("connect to %s in %s: %v", addr, ns.Name(), err)
	}
	return Summarize(d)
}

// nsHTTPClient is an HTTP client whose connections are opened inside ns.
func nsHTTPClient(ns *nettest.NS) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 5 * time.Second}
}

// saveHeapProfile writes the proxy's /debug/pprof/heap to path.
func saveHeapProfile(ctx context.Context, c *http.Client, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:10249/debug/pprof/heap", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}

// scrapeGauge reads the first sample of metric name from a Prometheus text
// endpoint.
func scrapeGauge(ctx context.Context, c *http.Client, endpoint, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || len(line) > len(name) && line[len(name)] != ' ' && line[len(name)] != '{' {
			continue
		}
		f := strings.Fields(line)
		return strconv.ParseFloat(f[len(f)-1], 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no sample of %s", endpoint, name)
}

// procMiB reads a kB field of /proc/<pid>/status in MiB (0 if unreadable).
func procMiB(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, field+":") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return 0
}
