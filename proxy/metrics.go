package proxy

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus metrics. Each Proxy registers its own
// set on its own registry, so tests can run several proxies in one process.
type Metrics struct {
	Registry *prometheus.Registry

	SyncDuration       *prometheus.HistogramVec // mode, family, kind=full|partial
	ProgrammingLatency *prometheus.HistogramVec // mode, family
	PendingChanges     prometheus.Gauge
	SyncFailures       *prometheus.CounterVec // mode, family
	RulesProgrammed    *prometheus.GaugeVec   // mode, family: rules/elements owned now
	RulesWritten       *prometheus.CounterVec // mode, family
	InvalidInput       *prometheus.CounterVec // kind=service|endpointslice
	ConntrackDeleted   prometheus.Counter
	ConntrackFailures  prometheus.Counter
	LastSync           prometheus.Gauge
	StateRepairs       *prometheus.CounterVec // mode, family: full syncs forced by a failed integrity check
}

// NewMetrics creates and registers the metrics on a fresh registry (which
// also carries the Go and process collectors).
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	latencyBuckets := prometheus.ExponentialBuckets(0.001, 2, 16) // 1ms .. ~33s
	m := &Metrics{
		Registry: reg,
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nodenet_proxy_sync_duration_seconds", Help: "Time one data-plane sync took (snapshot build + kernel programming).",
			Buckets: latencyBuckets,
		}, []string{"mode", "family", "kind"}),
		ProgrammingLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodenet_proxy_network_programming_duration_seconds",
			Help:    "Time from a Service/EndpointSlice change (the slice's last-change-trigger-time annotation, else when the proxy saw it) to the kernel being programmed.",
			Buckets: latencyBuckets,
		}, []string{"mode", "family"}),
		PendingChanges: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodenet_proxy_pending_changes", Help: "Services changed since the last sync.",
		}),
		SyncFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodenet_proxy_sync_failures_total", Help: "Data-plane syncs that failed.",
		}, []string{"mode", "family"}),
		RulesProgrammed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodenet_proxy_rules_programmed", Help: "Rules or set/map elements the data plane owns after the last sync.",
		}, []string{"mode", "family"}),
		RulesWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodenet_proxy_rules_written_total", Help: "Rules or set/map elements written to the kernel.",
		}, []string{"mode", "family"}),
		InvalidInput: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodenet_proxy_invalid_input_total", Help: "Service ports or endpoints skipped because they cannot be programmed.",
		}, []string{"kind"}),
		ConntrackDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodenet_proxy_conntrack_entries_deleted_total", Help: "Stale UDP conntrack entries deleted.",
		}),
		ConntrackFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodenet_proxy_conntrack_cleanup_failures_total", Help: "Failed UDP conntrack cleanups.",
		}),
		LastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodenet_proxy_last_sync_timestamp_seconds", Help: "Unix time of the last successful sync.",
		}),
		StateRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodenet_proxy_state_repairs_total", Help: "Full syncs forced because the data plane's kernel state had been removed by someone else.",
		}, []string{"mode", "family"}),
	}
	reg.MustRegister(m.SyncDuration, m.ProgrammingLatency, m.PendingChanges, m.SyncFailures,
		m.RulesProgrammed, m.RulesWritten, m.InvalidInput, m.ConntrackDeleted, m.ConntrackFailures, m.LastSync, m.StateRepairs,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) countInvalid(errs []error) {
	for _, err := range errs {
		kind := "service"
		if strings.Contains(err.Error(), "endpointslice") {
			kind = "endpointslice"
		}
		m.InvalidInput.WithLabelValues(kind).Inc()
	}
}
