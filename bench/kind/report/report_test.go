package report

import (
	"math"
	"strings"
	"testing"
)

func TestMedianAndSpread(t *testing.T) {
	for _, c := range []struct {
		v              []float64
		median, spread float64
	}{
		{[]float64{3, 1, 2}, 2, 1},
		{[]float64{4, 1, 2, 3}, 2.5, 1.2},
		{[]float64{5}, 5, 0},
	} {
		if m := Median(c.v); m != c.median {
			t.Errorf("Median(%v) = %v", c.v, m)
		}
		if s := Spread(c.v); math.Abs(s-c.spread) > 1e-9 {
			t.Errorf("Spread(%v) = %v", c.v, s)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("median of nothing")
	}
}

func TestChartWithoutBaselineScalesToBest(t *testing.T) {
	d := Data{Results: []Result{
		{Dataplane: "a", Scenario: "s", Test: "T", Values: []float64{50}},
		{Dataplane: "b", Scenario: "s", Test: "T", Values: []float64{100}},
	}}
	svg := Chart(d, "T")
	for _, want := range []string{"share of the best result", ">50%<", ">100%<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}
