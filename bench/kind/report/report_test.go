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

// A later run added to a file replaces only its own results, keeps the
// earlier baseline, and says which planes it measured.
func TestMerge(t *testing.T) {
	r := func(plane, test string, v float64) Result {
		return Result{Dataplane: plane, Scenario: "pod → ClusterIP → pod", Test: test, Unit: "trans/s", Values: []float64{v}}
	}
	earlier := Data{Date: "d1", Command: "c1", Notes: []string{"n1", "nodenet host-gw ebpf not run: no bpffs"}, Results: []Result{
		r(Baseline, "TCP_CRR", 100), r("nodenet host-gw iptables", "TCP_CRR", 50), r("upstream host-gw iptables", "TCP_CRR", 40)}}
	later := Data{Date: "d2", Command: "c2", Results: []Result{
		r("nodenet host-gw ebpf", "TCP_CRR", 90), r("upstream host-gw iptables", "TCP_CRR", 45)}}
	m := Merge(earlier, later)
	got := map[string]float64{}
	for _, x := range m.Results {
		got[x.Dataplane] = x.Values[0]
	}
	want := map[string]float64{Baseline: 100, "nodenet host-gw iptables": 50, "upstream host-gw iptables": 45, "nodenet host-gw ebpf": 90}
	if len(got) != len(want) || len(m.Results) != 4 {
		t.Fatalf("results %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for _, x := range m.Results {
		if want := map[bool]int{true: 1, false: 0}[x.Dataplane == "nodenet host-gw ebpf" || x.Dataplane == "upstream host-gw iptables"]; x.Run != want {
			t.Errorf("%s: run %d, want %d", x.Dataplane, x.Run, want)
		}
	}
	// Figures of different runs are not compared: nodenet host-gw iptables
	// (run 0) against upstream host-gw iptables (run 1).
	if tg := Targets(m); !strings.Contains(tg, "1 pairs not compared: measured in different runs") {
		t.Errorf("targets compare across runs:\n%s", tg)
	}
	if m.Command != "c1; then c2" || m.Date != "d1; d2" {
		t.Errorf("command %q date %q", m.Command, m.Date)
	}
	if len(m.Notes) != 2 || m.Notes[0] != "n1" || !strings.Contains(m.Notes[1], "nodenet host-gw ebpf, upstream host-gw iptables") {
		t.Errorf("notes %q", m.Notes)
	}
	if len(earlier.Results) != 3 || earlier.Results[2].Values[0] != 40 {
		t.Errorf("Merge changed the earlier data: %+v", earlier.Results)
	}
}

// A report of a run at scale says so before any figure: its numbers are
// not comparable with a report of an empty cluster.
func TestMarkdownStatesScale(t *testing.T) {
	d := Data{Date: "d", Command: "c", Results: []Result{{Dataplane: "nodenet host-gw ebpf", Scenario: "pod-ClusterIP-pod", Test: "TCP_CRR", Unit: "trans/s", Values: []float64{1}}}}
	if md := Markdown(d, nil); strings.Contains(md, "more ClusterIP Services") {
		t.Errorf("an empty cluster's report claims filler Services:\n%s", md)
	}
	d.Services = 10000
	md := Markdown(d, nil)
	if i, j := strings.Index(md, "10000 more ClusterIP Services"), strings.Index(md, "## TCP_CRR"); i < 0 || i > j {
		t.Errorf("the scale is not stated before the figures:\n%s", md)
	}
}

// TestHostRoutingStated: the report says how nodenet forwarded pod
// traffic; files from before the flag were kernel.
func TestHostRoutingStated(t *testing.T) {
	for hr, want := range map[string]string{"": "--host-routing=kernel", "kernel": "--host-routing=kernel", "ebpf": "--host-routing=ebpf"} {
		if md := Markdown(Data{HostRouting: hr}, nil); !strings.Contains(md, want) {
			t.Errorf("HostRouting %q: the report does not say %s", hr, want)
		}
	}
}

// TestHostRoutingOutcomesListed: what the programs did with a result's
// packets is in the report, under the result's name; without any such
// record there is no section.
func TestHostRoutingOutcomesListed(t *testing.T) {
	d := Data{Results: []Result{{Dataplane: "nodenet host-gw iptables", Scenario: "pod-pod across nodes", Test: "UDP_RR", Unit: "trans/s",
		Values: []float64{1}, HostRouting: []string{"nodenet-worker: forwarded +40, nat +2", "nodenet-worker2: delivered +40"}}}}
	md := Markdown(d, nil)
	want := "- nodenet host-gw iptables, pod-pod across nodes, UDP_RR: nodenet-worker: forwarded +40, nat +2; nodenet-worker2: delivered +40\n"
	if !strings.Contains(md, "## What host routing did with the packets") || !strings.Contains(md, want) {
		t.Errorf("report lacks the host routing outcomes (%q):\n%s", want, md)
	}
	d.Results[0].HostRouting = nil
	if md := Markdown(d, nil); strings.Contains(md, "What host routing did") {
		t.Error("a host routing section without records")
	}
}

// TestPodPodTargetJudgedOnPairs: with node-to-node runs taken beside each
// pod → pod run, the host-gw target is judged on the run-by-run ratio, not
// on a baseline measured minutes apart.
func TestPodPodTargetJudgedOnPairs(t *testing.T) {
	d := Data{Results: []Result{
		{Dataplane: Baseline, Scenario: "node-node", Test: "TCP_RR", Unit: "trans/s", Values: []float64{120, 120, 120}},
		{Dataplane: "nodenet host-gw iptables", Scenario: "pod-pod across nodes", Test: "TCP_RR", Unit: "trans/s",
			Values: []float64{90, 96, 97}, Paired: []float64{95, 100, 100}},
	}}
	if got := d.Results[1].PairedRatio(); got < 0.959 || got > 0.961 {
		t.Fatalf("PairedRatio = %v, want 0.96", got)
	}
	out := Targets(d)
	if !strings.Contains(out, "pod-pod across nodes, TCP_RR: 96% (met, paired run by run with the baseline; against the baseline's own median 80%)") {
		t.Fatalf("target not judged on the pairs:\n%s", out)
	}
	if (Result{Values: []float64{1, 2}, Paired: []float64{1}}).PairedRatio() != 0 {
		t.Fatal("mismatched pairs must give no ratio")
	}
}

// A median below upstream's is told apart from a difference every run shows.
func TestMissesWithinTheRunsRanges(t *testing.T) {
	d := Data{Results: []Result{
		{Dataplane: "nodenet host-gw iptables", Scenario: "outside-NodePort-pod", Test: "TCP_RR", Unit: "trans/s", Values: []float64{90, 95, 105}},
		{Dataplane: "upstream host-gw iptables", Scenario: "outside-NodePort-pod", Test: "TCP_RR", Unit: "trans/s", Values: []float64{100, 98, 110}},
		{Dataplane: "nodenet host-gw iptables", Scenario: "outside-NodePort-pod", Test: "UDP_RR", Unit: "trans/s", Values: []float64{80, 81, 82}},
		{Dataplane: "upstream host-gw iptables", Scenario: "outside-NodePort-pod", Test: "UDP_RR", Unit: "trans/s", Values: []float64{90, 91, 92}},
	}}
	out := Targets(d)
	for _, want := range []string{
		"**not met**: 0 of 2 comparisons; below upstream (1 of these 2 within the runs' noise",
		"outside-NodePort-pod TCP_RR: 95% of upstream (ranges overlap)",
		"outside-NodePort-pod UDP_RR: 89% of upstream (every nodenet run below every upstream run)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}

// Beside the misses, the report gives the spread of nodenet's own planes
// on a path no proxy mode touches; and beside the TCP_CRR factor, the
// factor of the same plane's pod → pod across nodes (the ceiling).
func TestYardsticks(t *testing.T) {
	r := func(plane, scenario, test string, v ...float64) Result {
		return Result{Dataplane: plane, Scenario: scenario, Test: test, Unit: "trans/s", Values: v}
	}
	d := Data{Results: []Result{
		r("nodenet host-gw iptables", "pod-pod same node", "TCP_RR", 100, 100, 100),
		r("nodenet host-gw nftables", "pod-pod same node", "TCP_RR", 108, 108, 108),
		r("nodenet host-gw ebpf", "pod-pod same node", "TCP_RR", 104, 104, 104),
		r("nodenet vxlan iptables", "pod-pod same node", "TCP_RR", 50, 50, 50), // another backend: not compared with host-gw
		r("nodenet vxlan nftables", "pod-pod same node", "TCP_RR", 52, 52, 52),
		r("upstream host-gw iptables", "pod-pod same node", "TCP_RR", 101, 101, 101),
		r("nodenet host-gw ebpf", "pod-ClusterIP-pod", "TCP_CRR", 700, 700, 700),
		r("nodenet host-gw ebpf", "pod-pod across nodes", "TCP_CRR", 750, 750, 750),
		r("upstream host-gw iptables", "pod-ClusterIP-pod", "TCP_CRR", 600, 600, 600),
	}}
	out := Targets(d)
	for _, want := range []string{
		"differ by up to 8% between one another on pod-pod same node (largest max/min of their medians: host-gw TCP_RR)",
		"host-gw: 1.17× (700 vs 600 trans/s): not met; pod → pod across nodes on this plane, the same connection without a Service and so the most any proxy could reach, is 1.25× (750 trans/s)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	// Every comparison met: no yardstick needed.
	d.Results[5].Values = []float64{90, 90, 90}
	if out := Targets(d); strings.Contains(out, "For scale") {
		t.Errorf("a yardstick without misses:\n%s", out)
	}
}

func TestSharePercentNeverRoundsUpToTheLimit(t *testing.T) {
	for v, want := range map[float64]string{0.94998: "94.9%", 0.95: "95%", 0.9612: "96%", 0.9449: "94%", 1.2: "120%"} {
		if got := sharePercent(v, 0.95); got != want {
			t.Errorf("sharePercent(%v) = %s, want %s", v, got, want)
		}
	}
}

// On one cluster of both data planes, a nodenet figure is judged against
// the upstream runs alternated with its own (Beside), not against the
// upstream plane's column, which may come from another alternation (kube-
// proxy iptables beside nodenet iptables, then again beside ebpf).
func TestAlternatedRunsJudgedSideBySide(t *testing.T) {
	alt := func(plane, test string, v []float64, beside string, bv ...float64) Result {
		r := Result{Dataplane: plane, Scenario: "pod-ClusterIP-pod", Test: test, Unit: "trans/s", Values: v}
		if beside != "" {
			r.Beside = &Alternate{Dataplane: beside, Values: bv}
		}
		return r
	}
	d := Data{Results: []Result{
		alt("nodenet host-gw iptables", "TCP_RR", []float64{97, 98, 103}, "upstream host-gw iptables", 98, 99, 101),
		alt("nodenet host-gw ebpf", "TCP_CRR", []float64{900, 910, 905}, "upstream host-gw iptables", 600, 580, 590),
		alt("nodenet host-gw ebpf", "TCP_RR", []float64{120, 120, 120}, "upstream host-gw iptables", 110, 110, 110),
		alt("upstream host-gw iptables", "TCP_RR", []float64{98, 99, 101}, ""),
		// The column's own TCP_CRR (beside nodenet iptables, not shown
		// here) is far from what ran beside ebpf.
		alt("upstream host-gw iptables", "TCP_CRR", []float64{300, 300, 300}, ""),
	}}
	out := Targets(d)
	for _, want := range []string{
		"1 of 1 comparisons of figures measured on one cluster of both data planes, their runs alternated; **not met**: 0 of 1",
		"nodenet host-gw iptables pod-ClusterIP-pod TCP_RR: 99% of upstream (ranges overlap); at or above the upstream run beside it in 1 of 3 alternations",
		"host-gw: 1.53× (905 vs 590 trans/s, runs alternated on one cluster): met",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if md := Markdown(d, nil); !strings.Contains(md, "**Both data planes ran on one cluster**") {
		t.Error("the report does not say the planes shared a cluster")
	}
}
