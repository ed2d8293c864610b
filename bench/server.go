package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// MainPackage is the import path of the nodenet command the harness builds.
const MainPackage = "github.com/nodenet/nodenet/cmd/nodenet"

// BinaryEnv names a prebuilt nodenet binary to use instead of building one.
const BinaryEnv = "NODENET_BENCH_BINARY"

// goTool finds the go command: the one on PATH, else the one of the
// toolchain that built this program.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// ProxyPackage is the import path of the proxy alone (what the DaemonSet
// runs).
const ProxyPackage = "github.com/nodenet/nodenet/cmd/nodenet-proxy"

// BuildBinary runs `go build -o dir/nodenet ./cmd/nodenet` and returns the
// binary's path. It must run inside the module (tests run in bench/).
func BuildBinary(ctx context.Context, dir string) (string, error) {
	return buildCommand(ctx, MainPackage, filepath.Join(dir, "nodenet"))
}

// BuildProxyBinary builds dir/nodenet-proxy (cmd/nodenet-proxy) likewise.
func BuildProxyBinary(ctx context.Context, dir string) (string, error) {
	return buildCommand(ctx, ProxyPackage, filepath.Join(dir, "nodenet-proxy"))
}

func buildCommand(ctx context.Context, pkg, out string) (string, error) {
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", out, pkg)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, buf.String())
	}
	return out, nil
}

// ServerOptions configure StartServer.
type ServerOptions struct {
	// Binary is a prebuilt nodenet; empty means $NODENET_BENCH_BINARY, else
	// build ./cmd/nodenet into the server's temp dir.
	Binary string
	// ExtraArgs are appended to `nodenet apiserver ...`.
	ExtraArgs []string
	// ReadyTimeout bounds start-up (default 2 minutes).
	ReadyTimeout time.Duration
}

// Server is a `nodenet apiserver` child process with its own temp dir.
type Server struct {
	// Dir is the temp dir holding the binary, the data dir and the log; Stop
	// removes it.
	Dir        string
	DataDir    string
	Binary     string
	LogPath    string
	URL        string
	Kubeconfig string
	// Config is the admin rest.Config with client-side rate limits lifted
	// (QPS -1). Client shares one transport (one HTTP/2 connection).
	Config *rest.Config
	Client kubernetes.Interface

	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	logFile  *os.File
	stopOnce sync.Once
	stopErr  error
}

// StartServer builds (unless given) and starts `nodenet apiserver --data-dir
// <tmp> --secure-port <free port> --log-level warn`, and waits for /readyz.
// On error nothing is left behind. The caller must call Stop.
func StartServer(ctx context.Context, opts ServerOptions) (_ *Server, err error) {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	dir, err := os.MkdirTemp("", "nodenet-bench-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, DataDir: filepath.Join(dir, "data"), LogPath: filepath.Join(dir, "apiserver.log"), exited: make(chan struct{})}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	bin := opts.Binary
	if bin == "" {
		bin = os.Getenv(BinaryEnv)
	}
	if bin == "" {
		if bin, err = BuildBinary(ctx, dir); err != nil {
			return nil, err
		}
	}
	s.Binary = bin
	// The port is free when picked but may be taken before the server binds
	// it; then the process exits at once and we try another.
	for attempt := 0; ; attempt++ {
		err = s.start(ctx, opts)
		if err == nil {
			return s, nil
		}
		if attempt >= 3 || !errors.Is(err, errPortTaken) {
			return nil, err
		}
		s.kill()
		s.exited = make(chan struct{})
		s.Client, s.Config, s.URL = nil, nil, ""
		_ = os.RemoveAll(s.DataDir)
	}
}

// errPortTaken: the server exited because another process bound its port
// between freePort and the server's listen; start again with another.
var errPortTaken = errors.New("port taken")

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(ctx context.Context, opts ServerOptions) error {
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("find a free port: %w", err)
	}
	if s.logFile != nil {
		s.logFile.Close()
	}
	if s.logFile, err = os.Create(s.LogPath); err != nil {
		return err
	}
	args := append([]string{"apiserver", "--data-dir", s.DataDir, "--secure-port", strconv.Itoa(port), "--log-level", "warn"}, opts.ExtraArgs...)
	s.cmd = exec.Command(s.Binary, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logFile, s.logFile
	// Its own process group, so a Ctrl-C meant for `go test` reaches the
	// harness (which then stops the server) rather than racing it; and
	// killed by the kernel should the harness die without running its
	// cleanups (a test timeout panics past them).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.Binary, err)
	}
	exited := s.exited
	go func() {
		s.waitErr = s.cmd.Wait()
		close(exited)
	}()
	s.Kubeconfig = filepath.Join(s.DataDir, "admin.kubeconfig")
	return s.waitReady(ctx, opts.ReadyTimeout)
}

func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-s.exited:
			tail := s.LogTail(4096)
			err := fmt.Errorf("nodenet apiserver exited during start-up (%v):\n%s", s.waitErr, tail)
			if strings.Contains(tail, "address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("nodenet apiserver not ready after %s (last: %v):\n%s", timeout, lastErr, s.LogTail(4096))
		case <-tick.C:
		}
		if s.Client == nil {
			if _, err := os.Stat(s.Kubeconfig); err != nil {
				lastErr = err
				continue
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
			if err != nil {
				lastErr = err
				continue
			}
			cfg.QPS, cfg.Burst = -1, 0
			cfg.Timeout = 0
			s.Config, s.URL = cfg, cfg.Host
			if s.Client, err = kubernetes.NewForConfig(cfg); err != nil {
				return err
			}
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		body, err := s.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		rcancel()
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		lastErr = err
	}
}

// NewClient returns a client with its own transport, hence its own TCP
// connection, as a separate node's agent would have.
func (s *Server) NewClient() (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(s.Config)
	// A custom dialer makes client-go skip its shared transport cache.
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	return kubernetes.NewForConfig(cfg)
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Memory is what the server process uses.
type Memory struct {
	// RSS and PeakRSS are VmRSS and VmHWM from /proc/<pid>/status, bytes.
	RSS, PeakRSS uint64
	// HeapInuse is go_memstats_heap_inuse_bytes and ProcessRSS
	// process_resident_memory_bytes, both from the server's /metrics.
	HeapInuse, ProcessRSS uint64
}

// MiB converts bytes to MiB.
func MiB(b uint64) float64 { return float64(b) / (1 << 20) }

func (m Memory) String() string {
	return fmt.Sprintf("VmRSS %.1f MiB, VmHWM %.1f MiB, go heap in use %.1f MiB (metrics RSS %.1f MiB)",
		MiB(m.RSS), MiB(m.PeakRSS), MiB(m.HeapInuse), MiB(m.ProcessRSS))
}

// Memory reads the server's memory from /proc and /metrics.
func (s *Server) Memory(ctx context.Context) (Memory, error) {
	var m Memory
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseUint(f[0], 10, 64)
		switch k {
		case "VmRSS":
			m.RSS = n << 10
		case "VmHWM":
			m.PeakRSS = n << 10
		}
	}
	metrics, err := s.Metrics(ctx, "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes")
	if err != nil {
		return m, err
	}
	m.HeapInuse = uint64(metrics["go_memstats_heap_inuse_bytes"])
	m.ProcessRSS = uint64(metrics["process_resident_memory_bytes"])
	return m, nil
}

// Usage is what a process has consumed so far; subtract two readings to get
// what a scenario cost.
type Usage struct {
	// CPU is user+system CPU time.
	CPU time.Duration
	// AllocBytes is the total the Go heap has allocated (the server's
	// go_memstats_alloc_bytes_total; 0 for the harness).
	AllocBytes float64
}

// Sub is u − v.
func (u Usage) Sub(v Usage) Usage {
	return Usage{CPU: u.CPU - v.CPU, AllocBytes: u.AllocBytes - v.AllocBytes}
}

// Usage reads the server's CPU time and allocation total from /metrics.
func (s *Server) Usage(ctx context.Context) (Usage, error) {
	m, err := s.Metrics(ctx, "process_cpu_seconds_total", "go_memstats_alloc_bytes_total")
	if err != nil {
		return Usage{}, err
	}
	return Usage{CPU: time.Duration(m["process_cpu_seconds_total"] * float64(time.Second)), AllocBytes: m["go_memstats_alloc_bytes_total"]}, nil
}

// SelfUsage is the harness process's own CPU time (client-side cost: JSON
// decoding, TLS), from getrusage.
func SelfUsage() Usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}
	}
	return Usage{CPU: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
}

// Metrics reads unlabelled samples from the server's /metrics.
func (s *Server) Metrics(ctx context.Context, names ...string) (map[string]float64, error) {
	body, err := s.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || !want[f[0]] {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return out, fmt.Errorf("/metrics has no %s", n)
		}
	}
	return out, nil
}

// LogTail is the end of the server's log.
func (s *Server) LogTail(n int64) string { return FileTail(s.LogPath, n) }

// FileTail is the last n bytes of the file at path ("" if unreadable).
func FileTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}

func (s *Server) running() bool {
	if s.cmd == nil || s.cmd.Process == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the server and reaps it. (The server starts no processes of
// its own; embedded etcd runs inside it.)
func (s *Server) kill() {
	if !s.running() {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Stop sends SIGTERM, waits up to 30 s for a clean exit (then SIGKILLs it)
// and removes the temp dir. It is safe to call twice. It
// returns an error when the server did not shut down cleanly.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		if s.running() {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
				var exitErr *exec.ExitError
				if s.waitErr != nil && !errors.As(s.waitErr, &exitErr) {
					s.stopErr = s.waitErr
				} else if s.waitErr != nil {
					s.stopErr = fmt.Errorf("nodenet apiserver exited with %v after SIGTERM:\n%s", s.waitErr, s.LogTail(2048))
				}
			case <-time.After(30 * time.Second):
				s.kill()
				s.stopErr = errors.New("nodenet apiserver ignored SIGTERM for 30s; killed")
			}
		}
		if s.Client != nil {
			if t, ok := s.Client.Discovery().RESTClient().(*rest.RESTClient); ok && t.Client != nil {
				t.Client.CloseIdleConnections()
			}
		}
		if s.logFile != nil {
			s.logFile.Close()
		}
		if err := os.RemoveAll(s.Dir); err != nil && s.stopErr == nil {
			s.stopErr = err
		}
	})
	return s.stopErr
}
