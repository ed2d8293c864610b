package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/proxy"
)

// KnownModes are every --proxy-mode value nodenet defines; a build may
// implement fewer.
var KnownModes = []string{"iptables", "nftables", "ipvs", "ebpf"}

// Mode is one data plane as the app sees it.
type Mode struct {
	// New builds the data plane for one family.
	New func(ctx context.Context, family proxy.Family) (proxy.DataPlane, error)
	// Cleanup removes every trace of this mode for one family (all its
	// variants, e.g. iptables-nft and iptables-legacy).
	Cleanup func(ctx context.Context, family proxy.Family) error
	// Available reports what this kernel lacks for the mode (nil: all
	// there; a nil func: always available). `nodenet up`, whose nodes
	// share this kernel, asks before starting anything.
	Available func() error
}

// Modes maps --proxy-mode values to the data planes built into this binary.
type Modes map[string]Mode

// ErrNotImplemented is returned for a known mode this build lacks.
var ErrNotImplemented = errors.New("not implemented in this build yet")

// Options are the proxy's settings, parsed from flags by cmd/nodenet.
type Options struct {
	// Mode is the --proxy-mode: a key of the Modes Run is given.
	Mode string
	// Families get one data plane each; empty means IPv4 only.
	Families []proxy.Family
	Core     proxy.Config

	HealthzBindAddress string // "" = off
	MetricsBindAddress string // "" = off
	// Profiling serves Go's /debug/pprof/ on the metrics address, as
	// kube-proxy's enableProfiling does (where memory and CPU go, on a
	// live node).
	Profiling bool
}

// Validate reports what is wrong with o that Modes.Check does not; Run
// refuses the same.
func (o Options) Validate() error {
	var errs []error
	if err := cidrlist.Check(o.Core.ClusterCIDRs, cidrlist.DualStack); err != nil {
		errs = append(errs, fmt.Errorf("--cluster-cidr: %w", err))
	}
	if err := cidrlist.Check(o.Core.NodePortAddresses.CIDRs, cidrlist.Any); err != nil {
		errs = append(errs, fmt.Errorf("--nodeport-addresses: %w", err))
	}
	for i, f := range o.Families {
		if f != proxy.IPv4 && f != proxy.IPv6 || slices.Contains(o.Families[:i], f) {
			errs = append(errs, fmt.Errorf("families %v: want IPv4 and/or IPv6, each once", o.Families))
			break
		}
	}
	if o.Core.MinSyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("--min-sync-period %v: must not be negative", o.Core.MinSyncPeriod))
	}
	if o.Core.SyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("--sync-period %v: must not be negative", o.Core.SyncPeriod))
	}
	return errors.Join(errs...)
}

// Check validates the mode against the built-in modes.
func (m Modes) Check(mode string) error {
	if _, ok := m[mode]; ok {
		return nil
	}
	if slices.Contains(KnownModes, mode) {
		return fmt.Errorf("--proxy-mode=%s: %w (built in: %v)", mode, ErrNotImplemented, m.names())
	}
	return fmt.Errorf("--proxy-mode=%q: unknown mode (want one of %v)", mode, KnownModes)
}

func (m Modes) names() []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// CleanupAll removes the state of every built-in mode except keep ("" =
// all), for every family. It tries them all and joins the errors.
func (m Modes) CleanupAll(ctx context.Context, keep string, families []proxy.Family, log *slog.Logger) error {
	var errs []error
	for _, name := range m.names() {
		if name == keep {
			continue
		}
		for _, f := range families {
			if err := m[name].Cleanup(ctx, f); err != nil {
				errs = append(errs, fmt.Errorf("clean up %s %s: %w", name, f, err))
				continue
			}
			log.Info("cleaned up other proxy mode", "mode", name, "family", f)
		}
	}
	return errors.Join(errs...)
}

// Run checks the mode, builds one data plane per family, removes the other
// modes' state after the first sync and runs the proxy until ctx ends. The data plane stays in
// place on return (a restart must not drop traffic).
func Run(ctx context.Context, o Options, modes Modes, client kubernetes.Interface) error {
	log := o.Core.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		o.Core.Logger = log
	}
	if err := errors.Join(modes.Check(o.Mode), o.Validate()); err != nil {
		return err
	}
	if len(o.Families) == 0 {
		o.Families = []proxy.Family{proxy.IPv4}
	}
	planes := map[proxy.Family]proxy.DataPlane{}
	for _, f := range o.Families {
		dp, err := modes[o.Mode].New(ctx, f)
		if err != nil {
			return fmt.Errorf("start %s data plane for %s: %w", o.Mode, f, err)
		}
		planes[f] = dp
	}
	if o.Core.Metrics == nil {
		o.Core.Metrics = proxy.NewMetrics()
	}
	p, err := proxy.New(o.Core, planes)
	if err != nil {
		return err
	}
	servers, err := startServers(o, p)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range servers {
			_ = s.Shutdown(sctx)
		}
	}()
	// The other modes' state goes once this mode holds every Service, not
	// before: a mode switch (a rollout of the DaemonSet with another
	// proxyMode) then never has a moment with no Service rules at all,
	// and until then the old rules, which send to the same endpoints,
	// keep answering. A new connection is NATed by whichever table's
	// hook sees it first; established ones keep their conntrack entry.
	// Start-up is the proxy's one burst (below): until the first sync the
	// collector runs at GOGC=25 instead of Go's 100, so the decode garbage
	// of the initial lists never piles up to twice the live heap. At
	// 10,000 Services this took the ebpf mode's peak resident memory from
	// 112 to 98 MiB for under a second more to the first sync
	// (bench/README.md, BenchmarkProxyProcess). A GOGC the operator set is
	// left alone.
	restoreGC := func() {}
	if os.Getenv("GOGC") == "" {
		old := debug.SetGCPercent(startupGCPercent)
		restoreGC = func() { debug.SetGCPercent(old) }
	}
	go func() {
		defer restoreGC()
		select {
		case <-ctx.Done():
			return
		case <-p.Synced():
		}
		if err := modes.CleanupAll(ctx, o.Mode, o.Families, log); err != nil {
			// Leftovers of another mode do not stop this one from working.
			log.Warn("cleaning up other proxy modes", "err", err)
		}
		// Start-up is the proxy's one burst: the initial lists decoded
		// and the first full sync built leave garbage several times the
		// live heap, which the runtime would hand back to the kernel only
		// slowly. Return it now, once: at 10,000 Services this is tens of
		// MiB of resident memory a node does not keep paying for.
		debug.FreeOSMemory()
	}()
	log.Info("proxy starting", "mode", o.Mode, "families", o.Families, "node", o.Core.NodeName)
	return p.Run(ctx, client)
}

// startupGCPercent is GOGC until the first sync (see Run).
const startupGCPercent = 25

func startServers(o Options, p *proxy.Proxy) ([]*http.Server, error) {
	var servers []*http.Server
	start := func(addr string, h http.Handler) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, s)
		go func() { _ = s.Serve(ln) }()
		return nil
	}
	if o.HealthzBindAddress != "" {
		if err := start(o.HealthzBindAddress, p.HealthHandler()); err != nil {
			return nil, err
		}
	}
	if o.MetricsBindAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(p.Metrics().Registry, promhttp.HandlerOpts{}))
		mux.Handle("/", p.HealthHandler())
		if o.Profiling {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		if err := start(o.MetricsBindAddress, mux); err != nil {
			for _, s := range servers {
				_ = s.Close()
			}
			return nil, err
		}
	}
	return servers, nil
}
