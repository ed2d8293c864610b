package hostrouting

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a packet in the programs, indexed as bpf/hostrouting.c's
// enum stat.
var outcomes = []string{
	"forwarded", // redirected past the stack, out of an interface
	"delivered", // redirected past the stack straight into a pod (bpf_redirect_peer)
	"not_pods",  // not pod to pod in the program's direction
	"not_fast",  // ICMP, fragment, IPv6 extension header, TTL about to expire
	"nat",       // a flow conntrack translates
	"no_route",  // the FIB declined: no neighbour yet, MTU, not forwarded
	"switched",  // a local pod's frame to another local pod, redirected straight into it
}

// Counts sums the programs' per-CPU counters by outcome.
func (r *Router) Counts() (map[string]uint64, error) {
	out := make(map[string]uint64, len(outcomes))
	for i, name := range outcomes {
		var perCPU []uint64
		if err := r.objs.Stats.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("host routing: read counter %s: %w", name, err)
		}
		var sum uint64
		for _, v := range perCPU {
			sum += v
		}
		out[name] = sum
	}
	return out, nil
}

var packetsDesc = prometheus.NewDesc("nodenet_host_routing_packets_total",
	"Packets seen by the eBPF host routing programs, by outcome: forwarded, delivered or switched past the stack, or left to it and why.",
	[]string{"outcome"}, nil)

// Collector exports Counts as nodenet_host_routing_packets_total.
func (r *Router) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Router }

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- packetsDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.r.Counts()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(packetsDesc, err)
		return
	}
	for _, name := range outcomes {
		ch <- prometheus.MustNewConstMetric(packetsDesc, prometheus.CounterValue, float64(counts[name]), name)
	}
}
