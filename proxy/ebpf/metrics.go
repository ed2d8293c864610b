package ebpf

import (
	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
)

// The data plane is a prometheus.Collector: the proxy core registers any
// data plane that is one on its registry, beside the metrics every mode
// serves (proxy/metrics.go).
var _ prometheus.Collector = (*DataPlane)(nil)

// Skip reasons of nodenet_proxy_ebpf_skipped_entries_total. Input no mode
// can program (port 0, an unknown protocol) never reaches a data plane: the
// core counts it in nodenet_proxy_invalid_input_total.
const (
	skipMapFull  = "map_full" // the services or backends map had no room
	skipConflict = "conflict" // another Service holds the same address, port and protocol
)

// mapMetrics are one family's descriptors: the family is a constant label,
// so the two families' data planes register side by side without their
// descriptors colliding.
type mapMetrics struct {
	entries, maxEntries, skipped, tcChanges *prometheus.Desc
}

func newMapMetrics(f string) mapMetrics {
	fam := prometheus.Labels{"ip_family": f}
	return mapMetrics{
		entries: prometheus.NewDesc("nodenet_proxy_ebpf_map_entries",
			"Entries in a BPF map of the ebpf data plane (services, backends: as last written; reverse, affinity: counted at scrape).",
			[]string{"map"}, fam),
		maxEntries: prometheus.NewDesc("nodenet_proxy_ebpf_map_max_entries",
			"Capacity of a BPF map of the ebpf data plane.", []string{"map"}, fam),
		skipped: prometheus.NewDesc("nodenet_proxy_ebpf_skipped_entries_total",
			"Service entry points (address, port, protocol) a sync could not program, by reason: map_full, conflict.",
			[]string{"reason"}, fam),
		tcChanges: prometheus.NewDesc("nodenet_proxy_ebpf_tc_interface_changes_total",
			"Interfaces --bpf-tc-interfaces=auto attached the tc program to (a link gained a node address) or detached it from (the link lost its node addresses or went away) after the start, by change: attached, detached.",
			[]string{"change"}, fam),
	}
}

// Describe implements prometheus.Collector.
func (d *DataPlane) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.metrics.entries
	ch <- d.metrics.maxEntries
	ch <- d.metrics.skipped
	ch <- d.metrics.tcChanges
}

// Collect implements prometheus.Collector. Map sizes are served once the
// maps are open and synced; the counters always.
func (d *DataPlane) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, reason := range []string{skipMapFull, skipConflict} {
		ch <- prometheus.MustNewConstMetric(d.metrics.skipped, prometheus.CounterValue, float64(d.skipped[reason]), reason)
	}
	ch <- prometheus.MustNewConstMetric(d.metrics.tcChanges, prometheus.CounterValue, float64(d.tcChanges.attached.Load()), "attached")
	ch <- prometheus.MustNewConstMetric(d.metrics.tcChanges, prometheus.CounterValue, float64(d.tcChanges.detached.Load()), "detached")
	if d.state == nil || !d.synced {
		return
	}
	counts := map[string]int{socklbMapServices: len(d.state.vips), socklbMapBackends: d.state.nSlots}
	for _, m := range d.maps {
		name := mapName(m)
		n, ok := counts[name]
		if !ok {
			var err error
			if n, err = countEntries(m); err != nil {
				d.log.Warn("count BPF map entries for metrics", "map", name, "err", err)
				continue
			}
		}
		ch <- prometheus.MustNewConstMetric(d.metrics.entries, prometheus.GaugeValue, float64(n), name)
		ch <- prometheus.MustNewConstMetric(d.metrics.maxEntries, prometheus.GaugeValue, float64(m.MaxEntries()), name)
	}
}

// mapName is the map's name in bpf/socklb.c (the kernel keeps it).
func mapName(m *ebpf.Map) string {
	info, err := m.Info()
	if err != nil {
		return m.String()
	}
	return info.Name
}

// countEntries walks m: the LRU maps (reverse, affinity) are written by
// the programs, so only the kernel knows their size; a walk is bounded by
// their max_entries (65536).
func countEntries(m *ebpf.Map) (int, error) {
	n := 0
	it := m.Iterate()
	key := make([]byte, m.KeySize())
	val := make([]byte, m.ValueSize())
	for it.Next(&key, &val) {
		n++
	}
	return n, it.Err()
}
