package report

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

// Baseline is the data plane name of the node-to-node measurement (host
// network on both ends, no overlay, no proxy): the limit on this machine.
const Baseline = "baseline (node to node)"

// Result is the runs of one test in one scenario on one data plane.
type Result struct {
	Dataplane string    `json:"dataplane"` // "nodenet host-gw iptables", Baseline, …
	Scenario  string    `json:"scenario"`  // "pod-pod same node", …
	Test      string    `json:"test"`      // TCP_STREAM, TCP_RR, TCP_CRR, UDP_RR
	Unit      string    `json:"unit"`      // "Mbit/s", "trans/s"
	Values    []float64 `json:"values"`
	// Conntrack is what grew in the conntrack statistics of the client's
	// and server's nodes over the runs ("nodenet-worker: invalid +12"),
	// recorded for TCP_CRR.
	Conntrack []string `json:"conntrack,omitempty"`
	// HostRouting is what nodenet's host routing programs did with the
	// packets of the runs on the client's and server's nodes: the growth
	// of nodenet_host_routing_packets_total by outcome
	// ("nodenet-worker: forwarded +41230, nat +12"), for nodenet planes
	// with --host-routing=ebpf.
	HostRouting []string `json:"hostRouting,omitempty"`
	// Paired are node-to-node runs of the same test, each taken right
	// after the run of Values with the same index (pod → pod across
	// nodes): PairedRatio compares them run by run.
	Paired []float64 `json:"paired,omitempty"`
	// Run numbers the bench runs a file holds (bench -add): 0 for the
	// first. Figures are compared only within one run.
	Run int `json:"run,omitempty"`
	// Beside, on a cluster of both data planes (bench -one-cluster), is
	// the other data plane's runs of this scenario and test, each taken
	// right before or after the run of Values with the same index: the
	// comparison no drift of the machine between planes can tilt.
	Beside *Alternate `json:"beside,omitempty"`
}

// Alternate is another data plane's runs, alternated with a result's.
type Alternate struct {
	Dataplane string    `json:"dataplane"`
	Values    []float64 `json:"values"`
}

// Data is a results file: what ran, where, with which versions.
type Data struct {
	Date     string            `json:"date"`
	Command  string            `json:"command"`
	Machine  map[string]string `json:"machine"`
	Versions map[string]string `json:"versions"`
	Results  []Result          `json:"results"`
	// Notes are what did not run and why, and caveats of the data
	// ("nodenet host-gw ebpf not run: …").
	Notes []string `json:"notes,omitempty"`
	// Services is how many filler ClusterIP Services (one endpoint each)
	// every cluster carried beside the benchmark's (bench -services).
	Services int `json:"services,omitempty"`
	// HostRouting is nodenet's flanneld --host-routing in this run; ""
	// in files from before the flag, when it was always kernel.
	HostRouting string `json:"hostRouting,omitempty"`
}

// PairedRatio is the median of Values[i] / Paired[i], 0 without pairs.
func (r Result) PairedRatio() float64 {
	if len(r.Paired) == 0 || len(r.Paired) != len(r.Values) {
		return 0
	}
	var ratios []float64
	for i, v := range r.Values {
		if r.Paired[i] > 0 {
			ratios = append(ratios, v/r.Paired[i])
		}
	}
	if len(ratios) == 0 {
		return 0
	}
	return Median(ratios)
}

// HostRoutingOrKernel is HostRouting with the old files' meaning filled in.
func (d Data) HostRoutingOrKernel() string {
	if d.HostRouting == "" {
		return "kernel"
	}
	return d.HostRouting
}

func Load(path string) (Data, error) {
	var d Data
	b, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("parse %s: %w", path, err)
	}
	for _, r := range d.Results {
		if len(r.Values) == 0 {
			return d, fmt.Errorf("%s: %s %s %s has no values", path, r.Dataplane, r.Scenario, r.Test)
		}
	}
	return d, nil
}

// Median of the values (the mean of the middle two for an even count).
func Median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Spread is (max−min)/median: how far apart the runs were.
func Spread(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	m := Median(v)
	if m == 0 {
		return 0
	}
	return (hi - lo) / m
}

// alternated says whether any result's runs were alternated with another
// data plane's on one cluster.
func (d Data) alternated() bool {
	for _, r := range d.Results {
		if r.Beside != nil {
			return true
		}
	}
	return false
}

// baseline is the baseline's median per test.
func (d Data) baseline() map[string]float64 {
	b := map[string]float64{}
	for _, r := range d.Results {
		if r.Dataplane == Baseline {
			b[r.Test] = Median(r.Values)
		}
	}
	return b
}

// tests, scenarios and data planes in first-seen order: the order the
// benchmark ran them, which is the order a reader expects.
func (d Data) order() (tests, scenarios, planes []string) {
	seen := map[string]bool{}
	add := func(list *[]string, kind, v string) {
		if !seen[kind+v] {
			seen[kind+v] = true
			*list = append(*list, v)
		}
	}
	for _, r := range d.Results {
		add(&tests, "t", r.Test)
		add(&scenarios, "s", r.Scenario)
		add(&planes, "p", r.Dataplane)
	}
	return
}

func (d Data) find(plane, scenario, test string) (Result, bool) {
	for _, r := range d.Results {
		if r.Dataplane == plane && r.Scenario == scenario && r.Test == test {
			return r, true
		}
	}
	return Result{}, false
}

// Markdown is the report's text: where and what ran, then one table per
// test with scenarios as rows and data planes as columns.
func Markdown(d Data, chartFiles map[string]string) string {
	var b strings.Builder
	b.WriteString("# netperf on kind: nodenet's data planes against upstream flannel + kube-proxy and the node-to-node baseline\n\n")
	fmt.Fprintf(&b, "Generated by `%s` on %s.\n\n", d.Command, d.Date)
	fmt.Fprintf(&b, "nodenet's flanneld ran with **--host-routing=%s**%s.\n\n", d.HostRoutingOrKernel(), map[string]string{
		"ebpf":   ": pod-to-pod packets between nodes are forwarded by TCX programs on the pod veths and the uplinks, past netfilter (routes/hostrouting); upstream flannel forwards through the kernel's routing and netfilter",
		"kernel": ": the kernel's routing and netfilter forward pod-to-pod packets, as upstream flannel does",
	}[d.HostRoutingOrKernel()])
	if d.alternated() {
		b.WriteString("**Both data planes ran on one cluster** (bench -one-cluster): nodenet's DaemonSet on two workers, upstream flannel and kube-proxy on two others, the control plane running neither (the outside client of both NodePort scenarios); each side has the same pods and scenarios on its own pair of workers, and every run of a figure on one side was followed by the same figure's run on the other, the order swapped every round. Where a nodenet mode has no kube-proxy counterpart (ebpf), kube-proxy ran iptables beside it; those runs are judged in the targets but the tables show kube-proxy's first plane of that mode.\n\n")
	}
	if d.Services > 0 {
		fmt.Fprintf(&b, "Every cluster carried **%d more ClusterIP Services** (one ready endpoint each) beside the benchmark's, programmed before each data plane was measured: a large cluster's scale, where a proxy's per-connection lookup shows.\n\n", d.Services)
	}
	b.WriteString("| machine | |\n|---|---|\n")
	for _, k := range sortedKeys(d.Machine) {
		fmt.Fprintf(&b, "| %s | %s |\n", k, d.Machine[k])
	}
	b.WriteString("\n| component | version |\n|---|---|\n")
	for _, k := range sortedKeys(d.Versions) {
		fmt.Fprintf(&b, "| %s | %s |\n", k, d.Versions[k])
	}
	if len(d.Notes) > 0 {
		b.WriteString("\nNotes (what did not run, and caveats of the data):\n\n")
		for _, n := range d.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	b.WriteString("\n" + Targets(d))
	base := d.baseline()
	tests, scenarios, planes := d.order()
	b.WriteString("\nEach cell: median of the runs, spread ((max−min)/median) and, where a baseline ran, the share of the node-to-node baseline.\n")
	for _, t := range tests {
		unit := ""
		for _, r := range d.Results {
			if r.Test == t {
				unit = r.Unit
				break
			}
		}
		fmt.Fprintf(&b, "\n## %s (%s)\n\n", t, unit)
		if f := chartFiles[t]; f != "" {
			fmt.Fprintf(&b, "![%s](%s)\n\n", t, f)
		}
		b.WriteString("| scenario |")
		for _, p := range planes {
			fmt.Fprintf(&b, " %s |", p)
		}
		b.WriteString("\n|---|")
		for range planes {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		for _, s := range scenarios {
			fmt.Fprintf(&b, "| %s |", s)
			for _, p := range planes {
				r, ok := d.find(p, s, t)
				if !ok {
					b.WriteString(" – |")
					continue
				}
				m := Median(r.Values)
				fmt.Fprintf(&b, " %s ±%.0f%%", number(m), 100*Spread(r.Values))
				if bl := base[t]; bl > 0 && p != Baseline {
					fmt.Fprintf(&b, " (%.0f%%)", 100*m/bl)
				}
				b.WriteString(" |")
			}
			b.WriteString("\n")
		}
	}
	b.WriteString(conntrackSection(d))
	b.WriteString(hostRoutingSection(d))
	return b.String()
}

// hostRoutingSection lists, for nodenet's planes with eBPF host routing,
// what the programs did with each scenario's packets: a pod-to-pod figure
// below the node-to-node one with packets going to the stack (nat,
// not_fast, no_route) beside it is explained by those, one without them is
// the data path's own cost.
func hostRoutingSection(d Data) string {
	return resultList(d, "What host routing did with the packets (growth of `nodenet_host_routing_packets_total` by outcome on the client's and server's nodes)",
		"forwarded: routed past the node's stack out of an interface; delivered: from another node straight into a pod; switched: between two pods of one node, past the bridge; "+
			"nat, not_fast, no_route: left to the stack (a translated flow; ICMP, fragments, expiring TTL; the FIB declined).\n\n",
		func(r Result) []string { return r.HostRouting })
}

// conntrackSection lists the TCP_CRR results whose nodes' conntrack
// statistics grew: a collapse of connections/s with invalid or dropped
// packets beside it is the tracking's doing, not the forwarding's.
func conntrackSection(d Data) string {
	return resultList(d, "Conntrack statistics that grew during TCP_CRR (`conntrack -S` on the client's and server's nodes)", "",
		func(r Result) []string { return r.Conntrack })
}

// resultList is a section listing, per result that has any, the per-node
// records field picks out of it; "" when no result has one.
func resultList(d Data, heading, intro string, field func(Result) []string) string {
	var b strings.Builder
	for _, r := range d.Results {
		if recs := field(r); len(recs) > 0 {
			fmt.Fprintf(&b, "- %s, %s, %s: %s\n", r.Dataplane, r.Scenario, r.Test, strings.Join(recs, "; "))
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "\n## " + heading + "\n\n" + intro + b.String()
}

func number(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func sortedKeys(m map[string]string) []string {
	k := make([]string, 0, len(m))
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// Merge adds a later run's results to an earlier run's file (bench -add):
// a later result replaces the earlier one of the same data plane,
// scenario and test; the rest of the earlier file stays, its baseline
// included. The command, date and notes record both runs, and a note
// names the data planes the later run measured, so that a reader knows
// which figures were taken side by side.
func Merge(earlier, later Data) Data {
	type resultKey struct{ plane, scenario, test string }
	replaced := map[resultKey]bool{}
	var planes []string
	for _, r := range later.Results {
		replaced[resultKey{r.Dataplane, r.Scenario, r.Test}] = true
		if !slices.Contains(planes, r.Dataplane) {
			planes = append(planes, r.Dataplane)
		}
	}
	out := earlier
	out.Results = nil
	for _, r := range earlier.Results {
		if !replaced[resultKey{r.Dataplane, r.Scenario, r.Test}] {
			out.Results = append(out.Results, r)
		}
	}
	run := 0
	for _, r := range earlier.Results {
		run = max(run, r.Run+1)
	}
	for _, r := range later.Results {
		r.Run = run
		out.Results = append(out.Results, r)
	}
	out.Date = earlier.Date + "; " + later.Date
	out.Command = earlier.Command + "; then " + later.Command
	// An earlier "<plane> not run: …" is stale once the later run measured it.
	out.Notes = nil
	for _, n := range earlier.Notes {
		if p, _, ok := strings.Cut(n, " not run: "); !ok || !slices.Contains(planes, p) {
			out.Notes = append(out.Notes, n)
		}
	}
	out.Notes = append(out.Notes, later.Notes...)
	out.Notes = append(out.Notes, fmt.Sprintf("measured in the later run (%s), side by side with each other but not with the rest: %s",
		later.Date, strings.Join(planes, ", ")))
	return out
}
