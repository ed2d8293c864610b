package bench

import (
	"fmt"
	"slices"
	"time"
)

// Latency summarises a set of durations.
type Latency struct {
	N                  int
	Min, P50, P99, Max time.Duration
	Mean               time.Duration
}

// Summarize sorts d in place and returns its summary; percentiles are
// nearest-rank (P99 of 100 values is the 99th smallest).
func Summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return Latency{
		N: len(d), Min: d[0], P50: percentile(d, 50), P99: percentile(d, 99), Max: d[len(d)-1],
		Mean: sum / time.Duration(len(d)),
	}
}

// percentile of sorted d by nearest rank.
func percentile(d []time.Duration, p float64) time.Duration {
	rank := int(p/100*float64(len(d)) + 0.999999)
	rank = min(max(rank, 1), len(d))
	return d[rank-1]
}

// Ms converts a duration to float milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (l Latency) String() string {
	return fmt.Sprintf("n=%d min %.1fms p50 %.1fms p99 %.1fms max %.1fms mean %.1fms", l.N, Ms(l.Min), Ms(l.P50), Ms(l.P99), Ms(l.Max), Ms(l.Mean))
}

// PerSecond is n/d.
func PerSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
