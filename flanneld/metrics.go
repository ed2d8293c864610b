package flanneld

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are per daemon (own registry), so several daemons can run in one
// process, as they do in tests and benchmarks.
type metrics struct {
	reg        *prometheus.Registry
	peers      prometheus.Gauge
	entries    *prometheus.GaugeVec
	peerErrors prometheus.Gauge
	duration   prometheus.Histogram
	errors     *prometheus.CounterVec
	masqWrites prometheus.Counter
	ready      prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nodenet", Subsystem: "flanneld", Name: "peers",
			Help: "Peer nodes connected by the backend."}),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "nodenet", Subsystem: "flanneld", Name: "programmed_entries",
			Help: "Kernel entries programmed for peers, by kind (route, neighbour, fdb)."}, []string{"kind"}),
		peerErrors: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nodenet", Subsystem: "flanneld", Name: "unreachable_peers",
			Help: "Peers that could not be connected at the last sync (wrong backend, not on the L2 network, bad data)."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "nodenet", Subsystem: "flanneld", Name: "sync_duration_seconds",
			Help: "Duration of a full reconcile of routes, neighbours and FDB entries.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodenet", Subsystem: "flanneld", Name: "errors_total",
			Help: "Failed operations, by operation (sync, masq, lease)."}, []string{"op"}),
		masqWrites: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodenet", Subsystem: "flanneld", Name: "masq_writes_total",
			Help: "Times the masquerade rules had to be (re)written."}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nodenet", Subsystem: "flanneld", Name: "ready",
			Help: "1 once subnet.env, routes and masquerade rules are in place."}),
	}
	m.reg.MustRegister(m.peers, m.entries, m.peerErrors, m.duration, m.errors, m.masqWrites, m.ready,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}
