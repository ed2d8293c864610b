package proxy

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus metrics. Each Proxy registers its own
// set on its own registry, so tests can run several proxies in one process.
//
// Every series kube-proxy has an equivalent of is served under kube-proxy's
// name, type, buckets and labels (v1.37, pkg/proxy/metrics), with the same
// meaning, so dashboards and alerts written for kube-proxy work unchanged;
// only what kube-proxy has no equivalent for keeps a nodenet_proxy_ name.
// The mode-specific kube-proxy series are registered by New, for the mode
// the data planes implement, as kube-proxy registers them per mode.
type Metrics struct {
	Registry *prometheus.Registry

	// Per ip_family ("IPv4", "IPv6"), as in kube-proxy's per-family proxiers.
	SyncProxyRulesLatency             *prometheus.HistogramVec // every sync, failed ones included
	SyncFullProxyRulesLatency         *prometheus.HistogramVec
	SyncPartialProxyRulesLatency      *prometheus.HistogramVec
	SyncProxyRulesLastTimestamp       *prometheus.GaugeVec // last successful sync
	SyncProxyRulesLastQueuedTimestamp *prometheus.GaugeVec // last time a sync was asked for
	// NetworkProgrammingLatency is observed once per EndpointSlice change
	// that carries endpoints.kubernetes.io/last-change-trigger-time: from
	// that time to the sync that put the change into the kernel.
	NetworkProgrammingLatency *prometheus.HistogramVec
	// NoLocalEndpoints counts service ports with a Local traffic policy
	// whose traffic is dropped for want of a local endpoint, by
	// traffic_policy (internal, external) and ip_family.
	NoLocalEndpoints *prometheus.GaugeVec

	EndpointChangesPending prometheus.Gauge   // EndpointSlice changes since the last sync
	EndpointChangesTotal   prometheus.Counter // EndpointSlice events seen
	ServiceChangesPending  prometheus.Gauge   // services changed since the last sync
	ServiceChangesTotal    prometheus.Counter // Service events seen

	ProxyHealthzTotal *prometheus.CounterVec // code: answers of /healthz
	ProxyLivezTotal   *prometheus.CounterVec // code: answers of /livez

	ConntrackReconcileLatency *prometheus.HistogramVec // ip_family: stale UDP flow cleanup
	ConntrackDeletedEntries   *prometheus.CounterVec   // ip_family

	// Sync failures, by mode (see failureCounters).
	IPTablesRestoreFailures        *prometheus.CounterVec // iptables, ipvs
	IPTablesPartialRestoreFailures *prometheus.CounterVec // iptables: a partial sync failed (the next is full)
	NFTablesSyncFailures           *prometheus.CounterVec // nftables
	SyncFailures                   *prometheus.CounterVec // modes kube-proxy does not have a counter for

	// nodenet only: kube-proxy has no series with the same meaning.
	// (kubeproxy_sync_proxy_rules_iptables_total counts rules per table;
	// RulesProgrammed counts rules and set/map elements across tables, in
	// every mode.)
	RulesProgrammed   *prometheus.GaugeVec   // mode, family
	RulesWritten      *prometheus.CounterVec // mode, family
	InvalidInput      *prometheus.CounterVec // kind=service|endpointslice
	ConntrackFailures prometheus.Counter
	StateRepairs      *prometheus.CounterVec // mode, family: full syncs forced by a failed integrity check
	IntegrityChecks   *prometheus.CounterVec // mode, family, trigger=period|event: integrity checks run

	modeOnce sync.Once
}

const (
	kubeProxyNamespace = "kubeproxy"
	labelFamily        = "ip_family"
)

// kube-proxy's buckets: sync durations 1 ms .. 16 s; network programming
// 0.25 s .. 5 min, coarse because it spans the whole control plane.
var (
	syncBuckets        = prometheus.ExponentialBuckets(0.001, 2, 15)
	programmingBuckets = mergeBuckets(
		prometheus.LinearBuckets(0.25, 0.25, 2),
		prometheus.LinearBuckets(1, 1, 59),
		prometheus.LinearBuckets(60, 5, 12),
		prometheus.LinearBuckets(120, 30, 7),
	)
)

// mergeBuckets concatenates bucket lists behind a leading 0, as
// kube-proxy's network programming histogram has it.
func mergeBuckets(lists ...[]float64) []float64 {
	out := []float64{0}
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// alpha is how kube-proxy's metrics framework prefixes the help text of
// its (all alpha) metrics; kept so even the HELP lines match.
const alpha = "[ALPHA] "

func kpHistogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: kubeProxyNamespace, Name: name, Help: alpha + help, Buckets: buckets}, labels)
}

func kpGauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: kubeProxyNamespace, Name: name, Help: alpha + help}, labels)
}

func kpCounter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: kubeProxyNamespace, Name: name, Help: alpha + help}, labels)
}

// NewMetrics creates the metrics and registers the mode-independent ones on
// a fresh registry (which also carries the Go and process collectors).
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry:                          reg,
		SyncProxyRulesLatency:             kpHistogram("sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds", syncBuckets, labelFamily),
		SyncFullProxyRulesLatency:         kpHistogram("sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs", syncBuckets, labelFamily),
		SyncPartialProxyRulesLatency:      kpHistogram("sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs", syncBuckets, labelFamily),
		SyncProxyRulesLastTimestamp:       kpGauge("sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced", labelFamily),
		SyncProxyRulesLastQueuedTimestamp: kpGauge("sync_proxy_rules_last_queued_timestamp_seconds", "The last time a sync of proxy rules was queued", labelFamily),
		NetworkProgrammingLatency:         kpHistogram("network_programming_duration_seconds", "In Cluster Network Programming Latency in seconds", programmingBuckets, labelFamily),
		NoLocalEndpoints:                  kpGauge("sync_proxy_rules_no_local_endpoints_total", "Number of services with a Local traffic policy and no endpoints", "traffic_policy", labelFamily),
		EndpointChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: kubeProxyNamespace,
			Name: "sync_proxy_rules_endpoint_changes_pending", Help: alpha + "Pending proxy rules Endpoint changes"}),
		EndpointChangesTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: kubeProxyNamespace,
			Name: "sync_proxy_rules_endpoint_changes_total", Help: alpha + "Cumulative proxy rules Endpoint changes"}),
		ServiceChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: kubeProxyNamespace,
			Name: "sync_proxy_rules_service_changes_pending", Help: alpha + "Pending proxy rules Service changes"}),
		ServiceChangesTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: kubeProxyNamespace,
			Name: "sync_proxy_rules_service_changes_total", Help: alpha + "Cumulative proxy rules Service changes"}),
		ProxyHealthzTotal:              kpCounter("proxy_healthz_total", "Cumulative proxy healthz HTTP status", "code"),
		ProxyLivezTotal:                kpCounter("proxy_livez_total", "Cumulative proxy livez HTTP status", "code"),
		ConntrackReconcileLatency:      kpHistogram("conntrack_reconciler_sync_duration_seconds", "ReconcileConntrackFlowsLatency latency in seconds", syncBuckets, labelFamily),
		ConntrackDeletedEntries:        kpCounter("conntrack_reconciler_deleted_entries_total", "Cumulative conntrack flows deleted by conntrack reconciler", labelFamily),
		IPTablesRestoreFailures:        kpCounter("sync_proxy_rules_iptables_restore_failures_total", "Cumulative proxy iptables restore failures", labelFamily),
		IPTablesPartialRestoreFailures: kpCounter("sync_proxy_rules_iptables_partial_restore_failures_total", "Cumulative proxy iptables partial restore failures", labelFamily),
		NFTablesSyncFailures:           kpCounter("sync_proxy_rules_nftables_sync_failures_total", "Cumulative proxy nftables sync failures", labelFamily),
		SyncFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodenet_proxy_sync_failures_total", Help: "Data-plane syncs that failed, for modes kube-proxy has no failure counter for.",
		}, []string{labelFamily}),
		RulesProgrammed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodenet_proxy_rules_programmed", Help: "Rules or set/map elements the data plane owns after the last sync.",
		}, []string{"mode", "family"}),
		RulesWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodenet_proxy_rules_written_total", Help: "Rules or set/map elements written to the kernel.",
		}, []string{"mode", "family"}),
		InvalidInput: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodenet_proxy_invalid_input_total", Help: "Service ports or endpoints skipped because they cannot be programmed.",
		}, []string{"kind"}),
		ConntrackFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodenet_proxy_conntrack_cleanup_failures_total", Help: "Failed UDP conntrack cleanups.",
		}),
		StateRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodenet_proxy_state_repairs_total", Help: "Full syncs forced because the data plane's kernel state had been removed by someone else.",
		}, []string{"mode", "family"}),
		IntegrityChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodenet_proxy_integrity_checks_total", Help: "Checks whether the data plane's kernel state is still in place, by trigger: period (every IntegrityCheckPeriod) or event (the kernel announced a removal).",
		}, []string{"mode", "family", "trigger"}),
	}
	reg.MustRegister(m.SyncProxyRulesLatency,
		m.SyncProxyRulesLastTimestamp, m.SyncProxyRulesLastQueuedTimestamp, m.NetworkProgrammingLatency, m.NoLocalEndpoints,
		m.EndpointChangesPending, m.EndpointChangesTotal, m.ServiceChangesPending, m.ServiceChangesTotal,
		m.ProxyHealthzTotal, m.ProxyLivezTotal,
		m.RulesProgrammed, m.RulesWritten, m.InvalidInput, m.ConntrackFailures, m.StateRepairs, m.IntegrityChecks,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// registerMode registers the series kube-proxy registers only in some
// modes (once: every family runs the same mode): the sync failure
// counters, the full/partial sync histograms (iptables, nftables) and the
// conntrack reconciler's (iptables, ipvs, nftables). A mode kube-proxy does
// not have (ebpf) serves only what kube-proxy serves in every mode, plus
// nodenet's own series.
func (m *Metrics) registerMode(mode string) {
	m.modeOnce.Do(func() {
		for _, c := range m.failureCounters(mode, true) {
			m.Registry.MustRegister(c)
		}
		switch mode {
		case "iptables", "nftables":
			m.Registry.MustRegister(m.SyncFullProxyRulesLatency, m.SyncPartialProxyRulesLatency)
		}
		switch mode {
		case "iptables", "ipvs", "nftables":
			m.Registry.MustRegister(m.ConntrackReconcileLatency, m.ConntrackDeletedEntries)
		}
	})
}

// failureCounters are the counters a failed sync of mode increments: the
// ones kube-proxy's proxier of that mode has (a failed partial iptables
// sync also counts as a partial restore failure), else nodenet's own.
// kube-proxy's ipvs mode counts the failures of the rule set it writes
// around IPVS as iptables restore failures; nodenet's writes nft instead,
// and counts a failed sync there, so kube-proxy's ipvs dashboards and
// alerts keep their series.
func (m *Metrics) failureCounters(mode string, partial bool) []*prometheus.CounterVec {
	switch mode {
	case "ipvs":
		return []*prometheus.CounterVec{m.IPTablesRestoreFailures}
	case "iptables":
		if partial {
			return []*prometheus.CounterVec{m.IPTablesRestoreFailures, m.IPTablesPartialRestoreFailures}
		}
		return []*prometheus.CounterVec{m.IPTablesRestoreFailures}
	case "nftables":
		return []*prometheus.CounterVec{m.NFTablesSyncFailures}
	}
	return []*prometheus.CounterVec{m.SyncFailures}
}

// registerPlanes registers the data planes that serve metrics of their own
// (e.g. the ebpf mode's map occupancy). The same plane given to a second
// Proxy on the same Metrics stays registered once.
func (m *Metrics) registerPlanes(planes map[Family]DataPlane) error {
	for f, dp := range planes {
		c, ok := dp.(prometheus.Collector)
		if !ok {
			continue
		}
		err := m.Registry.Register(c)
		var dup prometheus.AlreadyRegisteredError
		if err != nil && !(errors.As(err, &dup) && dup.ExistingCollector == c) {
			return fmt.Errorf("register %s %s data plane metrics: %w", dp.Name(), f, err)
		}
	}
	return nil
}

func (m *Metrics) countInvalid(errs []error) {
	for _, err := range errs {
		kind := InvalidService
		if ie := (*InvalidError)(nil); errors.As(err, &ie) {
			kind = ie.Kind
		}
		m.InvalidInput.WithLabelValues(string(kind)).Inc()
	}
}

const (
	noLocalInternal uint8 = 1 << iota
	noLocalExternal
)

// noLocalBits says which of sp's Local-policy traffic kube-proxy drops for
// want of a local endpoint; a port without a usable endpoint on any node
// is rejected instead and not counted, as in kube-proxy.
func noLocalBits(sp *ServicePort) uint8 {
	usable := slices.ContainsFunc(sp.Endpoints, func(e Endpoint) bool { return e.Ready || e.Serving && e.Terminating })
	if !usable || len(sp.Selected.Local) > 0 {
		return 0
	}
	var b uint8
	if sp.InternalPolicyLocal {
		b |= noLocalInternal
	}
	if sp.ExternalPolicyLocal {
		b |= noLocalExternal
	}
	return b
}

// countNoLocal updates kubeproxy_sync_proxy_rules_no_local_endpoints_total
// after a successful sync: from scratch on a full sync, else only for the
// ports the sync touched, so a partial sync stays proportional to the
// change.
func (st *familyState) countNoLocal(snap *Snapshot, cs ChangeSet, m *Metrics, fam string) {
	set := func(name ServicePortName, b uint8) {
		old := st.noLocal[name]
		for i, bit := range []uint8{noLocalInternal, noLocalExternal} {
			if old&bit != 0 {
				st.noLocalCount[i]--
			}
			if b&bit != 0 {
				st.noLocalCount[i]++
			}
		}
		if b == 0 {
			delete(st.noLocal, name)
		} else {
			st.noLocal[name] = b
		}
	}
	if cs.Full || st.noLocal == nil {
		st.noLocal, st.noLocalCount = map[ServicePortName]uint8{}, [2]int{}
		for name, sp := range snap.Services {
			set(name, noLocalBits(sp))
		}
	} else {
		for name := range cs.Ports {
			var b uint8
			if sp := snap.Services[name]; sp != nil {
				b = noLocalBits(sp)
			}
			set(name, b)
		}
	}
	m.NoLocalEndpoints.WithLabelValues("internal", fam).Set(float64(st.noLocalCount[0]))
	m.NoLocalEndpoints.WithLabelValues("external", fam).Set(float64(st.noLocalCount[1]))
}
