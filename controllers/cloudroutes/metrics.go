package cloudroutes

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the controller's Prometheus metrics. The caller makes them
// and registers them where it serves /metrics (the controller manager), so
// they outlive a controller: the manager builds one per leadership term,
// and Check builds a throwaway one.
type Metrics struct {
	routes     prometheus.Gauge
	operations *prometheus.CounterVec
	repair     prometheus.Histogram
}

// Values of the op label of route_operations_total.
const (
	opCreate = "create" // a route for a node that had none
	opRepair = "repair" // a route put back after it vanished from the table
	opDelete = "delete"
)

// NewMetrics returns unregistered metrics.
func NewMetrics() *Metrics {
	const ns, sub = "nodenet", "cloudroutes"
	return &Metrics{
		routes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "routes",
			Help: "Node podCIDR routes in the route table after the last sync."}),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "route_operations_total",
			Help: "Route changes, by op (create, repair: a route put back after it vanished from the table, delete) and result (success, error)."},
			[]string{"op", "result"}),
		repair: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "route_repair_seconds",
			Help:    "Time from receiving the kernel's notice that a route was deleted to the route being back.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.routes.Describe(ch)
	m.operations.Describe(ch)
	m.repair.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.routes.Collect(ch)
	m.operations.Collect(ch)
	m.repair.Collect(ch)
}

func (m *Metrics) count(op string, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.operations.WithLabelValues(op, result).Inc()
}
