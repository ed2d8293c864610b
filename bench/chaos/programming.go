package main

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// programmingMetric is the proxies' histogram of how long an EndpointSlice
// change took from the controller seeing its cause (a pod deleted, turned
// ready …) to the sync that put it into the node's kernel. A deleted
// endpoint pod drains for drainFor: a change that took longer sends new
// connections to a server that has stopped, so a fault's failures with a
// long tail here are the endpoint pipeline's, not the data plane's.
const programmingMetric = "kubeproxy_network_programming_duration_seconds"

// proxyMetricsAddr is where every node's proxy serves /metrics (its
// --metrics-bind-address default), inside the node's namespace.
const proxyMetricsAddr = "127.0.0.1:10249"

// histogram is one cumulative Prometheus histogram: counts[i] observations
// at most bounds[i], total of them all.
type histogram struct {
	bounds []float64
	counts []uint64
	total  uint64
}

// since is the observations h has and earlier had not. A proxy restarted
// in between (its counters back at zero) made all of h's since then.
func (h histogram) since(earlier histogram) histogram {
	if h.total < earlier.total || len(h.bounds) != len(earlier.bounds) {
		return h
	}
	d := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts)), total: h.total - earlier.total}
	for i := range h.counts {
		if h.counts[i] < earlier.counts[i] {
			return h
		}
		d.counts[i] = h.counts[i] - earlier.counts[i]
	}
	return d
}

// add is the histogram of both h's and o's observations.
func (h histogram) add(o histogram) histogram {
	if h.total == 0 && len(h.bounds) == 0 {
		return o
	}
	if len(o.bounds) != len(h.bounds) {
		return h
	}
	s := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts)), total: h.total + o.total}
	for i := range h.counts {
		s.counts[i] = h.counts[i] + o.counts[i]
	}
	return s
}

// quantile is the upper bound of the bucket holding the q-quantile
// (+Inf past the last bucket); 0 without observations.
func (h histogram) quantile(q float64) float64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	for i, c := range h.counts {
		if c >= rank {
			return h.bounds[i]
		}
	}
	return math.Inf(1)
}

// over is how many observations were above bound (rounded to a bucket
// bound at or below it).
func (h histogram) over(bound float64) uint64 {
	i := sort.SearchFloat64s(h.bounds, bound)
	if i < len(h.bounds) && h.bounds[i] == bound {
		return h.total - h.counts[i]
	}
	if i == 0 {
		return h.total
	}
	return h.total - h.counts[i-1]
}

// programming is the sum over every node's proxy of its programming
// histogram; unreachable proxies (killed, restarting) count nothing.
func programming(e *env) []histogram {
	out := make([]histogram, len(e.nodes))
	for i := range e.nodes {
		h, err := scrapeProgramming(e.nodeNetns(i + 1))
		if err == nil {
			out[i] = h
		}
	}
	return out
}

// programmingSince is what every node's proxy observed between two
// programming samples, summed over the nodes.
func programmingSince(after, before []histogram) histogram {
	var sum histogram
	for i := range after {
		var b histogram
		if i < len(before) {
			b = before[i]
		}
		sum = sum.add(after[i].since(b))
	}
	return sum
}

// scrapeProgramming reads the programming histogram of the proxy in
// netns, summed over its families.
func scrapeProgramming(netns string) (histogram, error) {
	c, err := dialIn(netns, proxyMetricsAddr)
	if err != nil {
		return histogram{}, fmt.Errorf("proxy metrics in %s: %w", netns, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", proxyMetricsAddr); err != nil {
		return histogram{}, fmt.Errorf("proxy metrics in %s: %w", netns, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return histogram{}, fmt.Errorf("proxy metrics in %s: %w", netns, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return histogram{}, fmt.Errorf("proxy metrics in %s: %s", netns, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return histogram{}, fmt.Errorf("parse proxy metrics in %s: %w", netns, err)
	}
	var sum histogram
	if mf := mfs[programmingMetric]; mf != nil {
		for _, m := range mf.GetMetric() {
			hm := m.GetHistogram()
			h := histogram{total: hm.GetSampleCount()}
			for _, b := range hm.GetBucket() {
				if math.IsInf(b.GetUpperBound(), 1) {
					continue
				}
				h.bounds = append(h.bounds, b.GetUpperBound())
				h.counts = append(h.counts, b.GetCumulativeCount())
			}
			sum = sum.add(h)
		}
	}
	return sum, nil
}

// String: "p50 ≤ 0.25 s, p99 ≤ 2 s, 3 of 1200 over 2 s" (bucket bounds).
func (h histogram) String() string {
	if h.total == 0 {
		return "–"
	}
	s := fmt.Sprintf("p50 ≤ %s, p99 ≤ %s", boundSecs(h.quantile(0.5)), boundSecs(h.quantile(0.99)))
	if n := h.over(drainFor.Seconds()); n > 0 {
		s += fmt.Sprintf(", %d of %d over %s", n, h.total, boundSecs(drainFor.Seconds()))
	}
	return s
}

// boundSecs renders a bucket bound.
func boundSecs(f float64) string {
	if math.IsInf(f, 1) {
		return "∞"
	}
	return fmt.Sprintf("%g s", f)
}
