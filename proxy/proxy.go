package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Config configures a Proxy. Zero values get kube-proxy's defaults.
type Config struct {
	// NodeName is this node (--hostname-override or the host name).
	NodeName string
	// ClusterCIDRs (--cluster-cidr, any family) and MasqueradeAll
	// (--masquerade-all) decide masquerading.
	ClusterCIDRs  []netip.Prefix
	MasqueradeAll bool
	// NodePortAddresses is --nodeport-addresses.
	NodePortAddresses NodePortAddresses
	// LocalAddrs lists the node's interface addresses (for
	// --nodeport-addresses CIDRs); nil means none are known.
	LocalAddrs func() ([]netip.Addr, error)

	// MinSyncPeriod bounds how often syncs run (bursts of SyncBurst allowed);
	// default 1s. SyncPeriod forces a full resync; default 1h (kube-proxy's
	// default for its iptables mode is 1h too, with partial syncs between).
	MinSyncPeriod time.Duration
	SyncPeriod    time.Duration
	SyncBurst     int
	// IntegrityCheckPeriod is how often data planes that implement
	// IntegrityChecker are asked whether their state is still there;
	// default 30s (kube-proxy's canary period), negative: never.
	IntegrityCheckPeriod time.Duration

	// Conntrack deletes stale UDP flows and flows that bypassed missing
	// rules (nil: no cleanup).
	Conntrack Conntrack
	// HealthCheckListen opens healthCheckNodePort listeners (nil:
	// DefaultListen).
	HealthCheckListen ListenFunc

	Logger  *slog.Logger
	Metrics *Metrics
}

// Proxy is the core: it owns the tracker, builds snapshots and drives one
// DataPlane per IP family from a bounded-frequency runner.
type Proxy struct {
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	tracker *Tracker
	planes  map[Family]DataPlane
	fams    []Family
	health  *healthState
	hc      *healthCheckServers

	nudgeCh chan struct{}
	// synced is closed by the first successful sync.
	synced     chan struct{}
	syncedOnce sync.Once

	// Sync state, guarded by syncMu (only the runner or SyncNow hold it).
	syncMu     sync.Mutex
	first      bool
	fullNeeded map[Family]bool
	desired    map[Family]*Snapshot // last built
	programmed map[Family]bool      // a sync of the family has succeeded
	state      map[Family]*familyState
	nodePorts  map[Family]NodePorts
	lastFull   time.Time

	// cleaner deletes the stale conntrack flows each sync finds (nil
	// without cfg.Conntrack).
	cleaner *conntrackCleaner
}

// New returns a Proxy driving planes (at least one family).
func New(cfg Config, planes map[Family]DataPlane) (*Proxy, error) {
	if len(planes) == 0 {
		return nil, errors.New("new proxy: no data plane")
	}
	if cfg.MinSyncPeriod == 0 {
		cfg.MinSyncPeriod = time.Second
	}
	if cfg.IntegrityCheckPeriod == 0 {
		cfg.IntegrityCheckPeriod = 30 * time.Second
	}
	if cfg.SyncPeriod == 0 {
		cfg.SyncPeriod = time.Hour
	}
	if cfg.SyncBurst <= 0 {
		cfg.SyncBurst = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.HealthCheckListen == nil {
		cfg.HealthCheckListen = DefaultListen
	}
	p := &Proxy{
		cfg: cfg, log: cfg.Logger, metrics: cfg.Metrics, planes: planes,
		nudgeCh:    make(chan struct{}, 1),
		first:      true,
		synced:     make(chan struct{}),
		fullNeeded: map[Family]bool{},
		desired:    map[Family]*Snapshot{},
		programmed: map[Family]bool{},
		state:      map[Family]*familyState{},
		nodePorts:  map[Family]NodePorts{},
	}
	stale := 2 * cfg.SyncPeriod
	if stale > 2*time.Minute {
		stale = 2 * time.Minute
	}
	p.health = newHealthState(max(stale, 10*cfg.MinSyncPeriod), time.Now)
	p.hc = &healthCheckServers{listen: cfg.HealthCheckListen, log: cfg.Logger, health: p.health}
	if cfg.Conntrack != nil {
		p.cleaner = newConntrackCleaner(p.deleteFlows)
	}
	for f := range planes {
		p.fams = append(p.fams, f)
		p.state[f] = &familyState{byService: map[types.NamespacedName][]*ServicePort{}}
	}
	slices.Sort(p.fams)
	p.health.node = func() *v1.Node { return p.tracker.Node() }
	p.health.metrics = cfg.Metrics
	p.tracker = NewTracker(p.nudge)
	p.tracker.metrics = cfg.Metrics
	cfg.Metrics.registerMode(p.Mode())
	if err := cfg.Metrics.registerPlanes(planes); err != nil {
		return nil, err
	}
	return p, nil
}

// Synced is closed once the data planes hold every Service: after the
// first successful sync.
func (p *Proxy) Synced() <-chan struct{} { return p.synced }

// Tracker is the change tracker the informers (or tests) feed.
func (p *Proxy) Tracker() *Tracker { return p.tracker }

// Metrics returns the proxy's metrics.
func (p *Proxy) Metrics() *Metrics { return p.metrics }

// Mode is the data planes' mode name (the one --proxy-mode selected), which
// decides the mode-specific metrics.
func (p *Proxy) Mode() string { return p.planes[p.fams[0]].Name() }

// nudge asks for a sync; like kube-proxy's Proxier.Sync it marks every
// family's change as queued (for /healthz and the queued timestamp).
func (p *Proxy) nudge() {
	for _, f := range p.fams {
		p.health.queued(f)
		p.metrics.SyncProxyRulesLastQueuedTimestamp.WithLabelValues(f.String()).SetToCurrentTime()
	}
	select {
	case p.nudgeCh <- struct{}{}:
	default:
	}
}

// Snapshot returns a copy of the last snapshot built for family f (nil
// before the first sync): the proxy's own changes in place, so callers get
// a map of their own. Read-only.
func (p *Proxy) Snapshot(f Family) *Snapshot {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	snap := p.desired[f]
	if snap == nil {
		return nil
	}
	cp := *snap
	cp.Services = maps.Clone(snap.Services)
	return &cp
}

// RunLoop runs the bounded-frequency sync runner until ctx ends: a change
// syncs at once if the burst allows, else after MinSyncPeriod since the
// earlier syncs; failures retry after MinSyncPeriod; SyncPeriod forces a full
// sync. It does not start informers (Run does).
func (p *Proxy) RunLoop(ctx context.Context) {
	defer p.hc.closeAll()
	bucket := newBucket(p.cfg.SyncBurst, p.cfg.MinSyncPeriod)
	periodic := time.NewTicker(p.cfg.SyncPeriod)
	defer periodic.Stop()
	var integrity <-chan time.Time
	if p.cfg.IntegrityCheckPeriod > 0 {
		tick := time.NewTicker(p.cfg.IntegrityCheckPeriod)
		defer tick.Stop()
		integrity = tick.C
	}
	// Data planes that announce removals have them checked at once
	// (coalesced, see changeDebounce), beside the periodic check.
	changed := make(chan struct{}, 1)
	var watchers sync.WaitGroup
	defer watchers.Wait()
	p.watchChanges(ctx, &watchers, changed)
	var recheck <-chan time.Time
	var lastRecheck time.Time
	var retry <-chan time.Time
	full := false
	// As kube-proxy's SyncLoop: the health clock starts now, so a first
	// sync that never succeeds turns /healthz unhealthy.
	for _, f := range p.fams {
		p.health.updated(f)
	}
	if p.cleaner != nil {
		defer p.cleaner.start(ctx)()
	}
	p.nudge() // the first sync runs even with nothing to track
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.nudgeCh:
		case <-periodic.C:
			full = true
		case <-integrity:
			if p.intact(ctx, "period") {
				continue
			}
			full = true
		case <-changed:
			if recheck == nil {
				wait := max(changeDebounce, time.Until(lastRecheck.Add(changeCheckInterval)))
				recheck = time.After(wait)
			}
			continue
		case <-recheck:
			recheck, lastRecheck = nil, time.Now()
			if p.intact(ctx, "event") {
				continue
			}
			full = true
		case <-retry:
			retry = nil
		}
		if wait := bucket.take(time.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		// Drain a nudge that arrived meanwhile: this sync covers it.
		select {
		case <-p.nudgeCh:
		default:
		}
		if err := p.SyncNow(ctx, full); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.log.Error("sync failed; retrying", "err", err, "after", p.cfg.MinSyncPeriod)
			retry = time.After(p.cfg.MinSyncPeriod)
		} else {
			full = false
		}
	}
}

// changeDebounce is how long after a data plane's first announcement of
// a removal its state is checked: a flush or a sync announces one removal
// per rule or element, and the check should see the burst's end.
// changeCheckInterval spaces the checks so announced, so the proxy's own
// syncs (which remove rules too) cost at most one check each.
const (
	changeDebounce      = 100 * time.Millisecond
	changeCheckInterval = 500 * time.Millisecond
	// watchRetry is the pause before subscribing again after a data
	// plane's watch failed.
	watchRetry = 5 * time.Second
)

// watchChanges starts a goroutine per data plane that is both an
// IntegrityChecker and a ChangeWatcher, sending on changed (without
// blocking: one pending signal is enough) whenever it announces a
// removal, until ctx ends. A watch that fails is started again after
// watchRetry, with a signal (what it missed meanwhile is unknown); a
// backend without announcements leaves the periodic check alone.
func (p *Proxy) watchChanges(ctx context.Context, wg *sync.WaitGroup, changed chan<- struct{}) {
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	for _, f := range p.fams {
		dp := p.planes[f]
		cw, can := dp.(ChangeWatcher)
		if _, checks := dp.(IntegrityChecker); !can || !checks {
			continue
		}
		wg.Go(func() {
			for {
				err := cw.WatchChanges(ctx, signal)
				switch {
				case ctx.Err() != nil:
					return
				case errors.Is(err, ErrNoChangeEvents):
					p.log.Info("data-plane state checked periodically only", "mode", dp.Name(), "family", f, "period", p.cfg.IntegrityCheckPeriod, "reason", err)
					return
				}
				p.log.Warn("watching data-plane state failed; retrying", "mode", dp.Name(), "family", f, "err", err, "after", watchRetry)
				select {
				case <-ctx.Done():
					return
				case <-time.After(watchRetry):
				}
				signal()
			}
		})
	}
}

// intact asks every data plane that can tell whether its state is still in
// the kernel; an error counts as intact (the next check asks again).
// trigger ("period" or "event") labels the check in the metrics.
func (p *Proxy) intact(ctx context.Context, trigger string) bool {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	ok := true
	for _, f := range p.fams {
		ic, can := p.planes[f].(IntegrityChecker)
		if !can {
			continue
		}
		p.metrics.IntegrityChecks.WithLabelValues(p.planes[f].Name(), f.String(), trigger).Inc()
		good, err := ic.Intact(ctx)
		switch {
		case err != nil:
			p.log.Debug("integrity check failed", "mode", p.planes[f].Name(), "family", f, "err", err)
		case !good:
			p.log.Warn("data-plane state was removed behind the proxy's back; repairing with a full sync", "mode", p.planes[f].Name(), "family", f, "noticed", trigger)
			p.metrics.StateRepairs.WithLabelValues(p.planes[f].Name(), f.String()).Inc()
			ok = false
		}
	}
	return ok
}

// SyncNow runs one sync immediately (tests and benchmarks call it directly;
// RunLoop calls it under its rate limit). forceFull rewrites everything.
func (p *Proxy) SyncNow(ctx context.Context, forceFull bool) error {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	start := time.Now()
	if start.Sub(p.lastFull) >= p.cfg.SyncPeriod {
		forceFull = true
	}
	first := p.first
	c := p.tracker.take(first)

	local, err := p.localAddrs()
	if err != nil {
		p.tracker.requeue(c)
		return fmt.Errorf("list local addresses: %w", err)
	}
	var errs []error
	allOK := true
	for _, f := range p.fams {
		famStart := time.Now()
		node := nodeInfo(p.cfg.NodeName, c.node, f)
		nps := p.cfg.NodePortAddresses.Resolve(f, local, node.IPs)
		npsChanged := !nps.Equal(p.nodePorts[f])
		full := forceFull || first || p.fullNeeded[f] || c.nodeChanged || npsChanged
		in := buildInput{
			family: f, node: node, nodePorts: nps,
			clusterCIDRs: familyPrefixes(p.cfg.ClusterCIDRs, f), masqueradeAll: p.cfg.MasqueradeAll,
			changes: c, reselectAll: c.nodeChanged,
		}
		snap, touched, bad := p.state[f].buildSnapshot(in, p.log)
		p.metrics.countInvalid(bad)
		p.desired[f] = snap
		p.nodePorts[f] = nps

		cs := ChangeSet{Full: full, Services: make(map[types.NamespacedName]struct{}, len(c.services)), Ports: touched}
		for n := range c.services {
			cs.Services[n] = struct{}{}
		}
		if err := p.syncFamily(ctx, f, snap, cs, famStart); err != nil {
			allOK = false
			p.fullNeeded[f] = true
			errs = append(errs, err)
			continue
		}
		p.fullNeeded[f] = false
		p.observeLatency(f, c.triggers)
		p.health.updated(f)
		p.metrics.SyncProxyRulesLastTimestamp.WithLabelValues(f.String()).SetToCurrentTime()
	}
	p.first = false
	if full := forceFull || first; full && allOK {
		p.lastFull = start
	}
	checked := make([]map[ServicePortName]*ServicePort, 0, len(p.fams))
	for _, f := range p.fams {
		checked = append(checked, p.state[f].healthChecked)
	}
	p.hc.update(ctx, healthChecks(checked))
	if !allOK {
		p.tracker.requeue(c)
		return errors.Join(errs...)
	}
	p.health.everSynced.Store(true)
	p.syncedOnce.Do(func() { close(p.synced) })
	if len(c.services) > 0 || first {
		p.log.Debug("synced", "services", len(c.services), "took", time.Since(start))
	}
	return nil
}

func (p *Proxy) syncFamily(ctx context.Context, f Family, snap *Snapshot, cs ChangeSet, start time.Time) error {
	dp := p.planes[f]
	mode, fam := dp.Name(), f.String()
	res, err := dp.Sync(ctx, snap, cs)
	took := time.Since(start).Seconds()
	p.metrics.SyncProxyRulesLatency.WithLabelValues(fam).Observe(took)
	if cs.Full {
		p.metrics.SyncFullProxyRulesLatency.WithLabelValues(fam).Observe(took)
	} else {
		p.metrics.SyncPartialProxyRulesLatency.WithLabelValues(fam).Observe(took)
	}
	if err != nil {
		for _, c := range p.metrics.failureCounters(mode, !cs.Full) {
			c.WithLabelValues(fam).Inc()
		}
		return fmt.Errorf("sync %s %s: %w", mode, f, err)
	}
	st := p.state[f]
	st.countNoLocal(snap, cs, p.metrics, fam)
	p.metrics.RulesProgrammed.WithLabelValues(mode, fam).Set(float64(res.Total))
	p.metrics.RulesWritten.WithLabelValues(mode, fam).Add(float64(res.Written))
	p.cleanConntrack(f, st.was, snap, cs)
	st.was = nil
	p.programmed[f] = true
	return nil
}

// cleanConntrack deletes the flows the sync just made stale (was holds the
// ports changed since the last successful sync, as it programmed them; see
// staleFlowsOf) and, on a full sync, the flows to VIPs that bypassed missing rules (see
// untranslated): a full sync is what repairs rules removed behind the
// proxy's back, and the flows created meanwhile outlive the repair.
func (p *Proxy) cleanConntrack(f Family, was map[ServicePortName]*ServicePort, next *Snapshot, cs ChangeSet) {
	if p.cleaner == nil || !p.programmed[f] && !cs.Full {
		return
	}
	var filter anyFilter
	if stale := staleFlowsOf(was, next); !stale.empty() {
		filter = append(filter, stale)
	}
	if cs.Full {
		// Only full syncs: the set holds every VIP, and a partial sync's
		// cost must stay that of its changes.
		if u := untranslatedFlows(next); len(u) > 0 {
			filter = append(filter, u)
		}
	}
	if len(filter) == 0 {
		return
	}
	// A deletion dumps the whole table: 0.5–2 s with the tens of thousands
	// of flows a busy node holds. Inside the sync it held back the next
	// one, and the endpoints that sync removed stayed in the rules past
	// their pods' drain. The rules are right already; the flows can go a
	// moment later.
	p.cleaner.add(f, filter)
}

// deleteFlows deletes f's flows that filter matches, with metrics.
func (p *Proxy) deleteFlows(f Family, filter anyFilter) {
	start := time.Now()
	n, err := p.cfg.Conntrack.DeleteFlows(f, filter)
	p.metrics.ConntrackReconcileLatency.WithLabelValues(f.String()).Observe(time.Since(start).Seconds())
	p.metrics.ConntrackDeletedEntries.WithLabelValues(f.String()).Add(float64(n))
	if err != nil {
		// Not fatal for the sync: the rules are right; stale flows age out.
		p.metrics.ConntrackFailures.Inc()
		p.log.Warn("clean stale conntrack entries", "family", f, "err", err)
	}
}

// observeLatency records, once f's sync is in the kernel, the network
// programming latency of every EndpointSlice change of family f it carried.
func (p *Proxy) observeLatency(f Family, triggers map[types.NamespacedName][]trigger) {
	now := time.Now()
	h := p.metrics.NetworkProgrammingLatency.WithLabelValues(f.String())
	for _, ts := range triggers {
		for _, tr := range ts {
			if tr.family == f {
				h.Observe(now.Sub(tr.at).Seconds())
			}
		}
	}
}

func (p *Proxy) localAddrs() ([]netip.Addr, error) {
	if p.cfg.LocalAddrs == nil || len(p.cfg.NodePortAddresses.CIDRs) == 0 {
		return nil, nil
	}
	return p.cfg.LocalAddrs()
}

func familyPrefixes(ps []netip.Prefix, f Family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if f.Contains(p.Addr()) {
			out = append(out, p.Masked())
		}
	}
	return out
}

// bucket is a token bucket: burst tokens, one refilled every period.
type bucket struct {
	burst  int
	period time.Duration
	tokens float64
	last   time.Time
}

func newBucket(burst int, period time.Duration) *bucket {
	return &bucket{burst: burst, period: period, tokens: float64(burst)}
}

// take consumes a token, returning how long to wait for it first.
func (b *bucket) take(now time.Time) time.Duration {
	if b.period <= 0 {
		return 0
	}
	if !b.last.IsZero() {
		b.tokens = min(float64(b.burst), b.tokens+float64(now.Sub(b.last))/float64(b.period))
	}
	b.last = now
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens * float64(b.period))
}

// HealthHandler serves /healthz, /livez and /readyz: unhealthy when changes
// have waited for a sync too long.
func (p *Proxy) HealthHandler() http.Handler { return p.health.handler() }
