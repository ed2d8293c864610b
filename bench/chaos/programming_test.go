package main

import (
	"math"
	"testing"
)

func TestProgrammingHistogram(t *testing.T) {
	bounds := []float64{0.25, 0.5, 1, 2, 3}
	before := histogram{bounds: bounds, counts: []uint64{10, 10, 10, 10, 10}, total: 10}
	after := histogram{bounds: bounds, counts: []uint64{100, 105, 107, 108, 110}, total: 111}
	d := after.since(before)
	if d.total != 101 || d.counts[0] != 90 || d.counts[4] != 100 {
		t.Fatalf("since: %+v", d)
	}
	if q := d.quantile(0.5); q != 0.25 {
		t.Errorf("p50 = %g, want 0.25", q)
	}
	if q := d.quantile(0.99); q != 3 {
		t.Errorf("p99 = %g, want 3", q)
	}
	if q := d.quantile(1); !math.IsInf(q, 1) {
		t.Errorf("max = %g, want +Inf (one past the last bucket)", q)
	}
	if n := d.over(2); n != 3 {
		t.Errorf("over 2 s = %d, want 3", n)
	}
	if n := d.over(2.5); n != 3 {
		t.Errorf("over 2.5 s (rounded down to a bound) = %d, want 3", n)
	}
	// A restarted proxy: its counters start again, everything is new.
	restarted := histogram{bounds: bounds, counts: []uint64{1, 1, 1, 1, 2}, total: 2}
	if r := restarted.since(before); r.total != 2 || r.counts[4] != 2 {
		t.Errorf("since across a restart: %+v", r)
	}
	// Nodes sum; an unreachable one (empty) adds nothing.
	sum := programmingSince([]histogram{after, {}}, []histogram{before, {}})
	if sum.total != 101 {
		t.Errorf("sum over nodes: %+v", sum)
	}
	if s := (histogram{}).String(); s != "–" {
		t.Errorf("empty renders %q", s)
	}
	if s := d.String(); s != "p50 ≤ 0.25 s, p99 ≤ 3 s, 3 of 101 over 2 s" {
		t.Errorf("renders %q", s)
	}
}
