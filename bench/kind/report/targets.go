package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Issue 15's targets, judged on the medians of a results file. Data plane
// names are "<nodenet|upstream> <backend> <mode>" (bench/kind's
// planeName); the baseline is Baseline.
const (
	podPodShare   = 0.95 // host-gw pod → pod, share of the baseline
	crrEBPFFactor = 1.5  // TCP_CRR through a ClusterIP, ebpf over kube-proxy iptables
	crrScenario   = "pod-ClusterIP-pod"
)

// plane is a parsed data plane name.
type plane struct{ impl, backend, mode string }

func parsePlane(name string) (plane, bool) {
	f := strings.Fields(name)
	if len(f) != 3 || (f[0] != "nodenet" && f[0] != "upstream") {
		return plane{}, false
	}
	return plane{f[0], f[1], f[2]}, true
}

func (p plane) String() string { return p.impl + " " + p.backend + " " + p.mode }

// Targets is the report's judgement of issue 15's three targets: every
// figure it compares, and whether each target is met, not met, or could
// not be judged (and why).
func Targets(d Data) string {
	var b strings.Builder
	b.WriteString("## Targets (issue 15), on the medians\n\n")
	tests, scenarios, planes := d.order()
	median := func(p, s, t string) (float64, bool) {
		r, ok := d.find(p, s, t)
		if !ok {
			return 0, false
		}
		return Median(r.Values), true
	}

	// 1. nodenet ≥ upstream, same backend and mode, every scenario/test.
	b.WriteString("**nodenet ≥ upstream in every scenario** (same backend and proxy mode, same run):")
	var met, total, otherRun, inNoise, alternated int
	var misses []string
	for _, name := range planes {
		n, ok := parsePlane(name)
		if !ok || n.impl != "nodenet" {
			continue
		}
		u := plane{"upstream", n.backend, n.mode}
		for _, s := range scenarios {
			for _, t := range tests {
				nr, ok1 := d.find(n.String(), s, t)
				uvals, same, ok2 := d.upstreamRuns(nr, u.String())
				if !ok1 || !ok2 {
					continue
				}
				nv, uv := Median(nr.Values), Median(uvals)
				if uv == 0 {
					continue
				}
				if !same {
					otherRun++
					continue
				}
				total++
				if nr.Beside != nil {
					alternated++
				}
				if nv >= uv {
					met++
					continue
				}
				overlap := slices.Max(nr.Values) >= slices.Min(uvals)
				if overlap {
					inNoise++
				}
				misses = append(misses, fmt.Sprintf("%s %s %s: %.0f%% of upstream%s%s", n, s, t, 100*nv/uv, rangesNote(overlap), aheadNote(nr)))
			}
		}
	}
	if alternated > 0 {
		fmt.Fprintf(&b, " %d of %d comparisons of figures measured on one cluster of both data planes, their runs alternated;", alternated, total)
	}
	if otherRun > 0 {
		fmt.Fprintf(&b, " (%d pairs not compared: measured in different runs)", otherRun)
	}
	switch {
	case total == 0:
		b.WriteString(" not judged: no nodenet and upstream planes with the same backend and mode ran in the same run.\n")
	case met == total:
		fmt.Fprintf(&b, " **met** (%d of %d comparisons).\n", met, total)
	default:
		fmt.Fprintf(&b, " **not met**: %d of %d comparisons; below upstream (%d of these %d within the runs' noise: nodenet's best run at or above upstream's worst):\n", met, total, inNoise, total-met)
		for _, m := range misses {
			fmt.Fprintf(&b, "  - %s\n", m)
		}
		if f := planeNoise(tests, planes, median); f != "" {
			b.WriteString(f)
		}
	}

	// 2. host-gw pod → pod ≥ 95 % of the baseline.
	fmt.Fprintf(&b, "\n**host-gw pod → pod ≥ %.0f%% of the node-to-node baseline**:", 100*podPodShare)
	base := d.baseline()
	baseRun := map[string]int{}
	for _, r := range d.Results {
		if r.Dataplane == Baseline {
			baseRun[r.Test] = r.Run
		}
	}
	var rows []string
	allMet, found := true, false
	for _, name := range planes {
		n, ok := parsePlane(name)
		if !ok || n.impl != "nodenet" || n.backend != "host-gw" {
			continue
		}
		for _, s := range []string{"pod-pod same node", "pod-pod across nodes"} {
			for _, t := range tests {
				v, ok := median(name, s, t)
				if !ok || base[t] == 0 {
					continue
				}
				found = true
				share := v / base[t]
				r, _ := d.find(name, s, t)
				how := ""
				if paired := r.PairedRatio(); paired > 0 {
					// Run by run against the baseline taken right
					// beside it: what the target is judged on.
					how = fmt.Sprintf(", paired run by run with the baseline; against the baseline's own median %.0f%%", 100*share)
					share = paired
				}
				verdict := "met"
				if share < podPodShare {
					verdict, allMet = "not met", false
				}
				if r.Run != baseRun[t] && how == "" {
					verdict += "; baseline from another run"
				}
				rows = append(rows, fmt.Sprintf("  - %s, %s, %s: %s (%s%s)", name, s, t, sharePercent(share, podPodShare), verdict, how))
			}
		}
	}
	switch {
	case !found:
		b.WriteString(" not judged: no nodenet host-gw pod → pod figures with a baseline.\n")
	case allMet:
		b.WriteString(" **met** (each figure below):\n")
	default:
		b.WriteString(" **not met** (each figure below):\n")
	}
	for _, r := range rows {
		b.WriteString(r + "\n")
	}

	// 3. TCP_CRR through a ClusterIP: ebpf ≥ 1.5× kube-proxy iptables.
	fmt.Fprintf(&b, "\n**TCP_CRR through a ClusterIP, nodenet ebpf ≥ %.1f× kube-proxy iptables**:", crrEBPFFactor)
	judged := false
	var crr []string
	for _, name := range planes {
		n, ok := parsePlane(name)
		if !ok || n.impl != "nodenet" || n.mode != "ebpf" {
			continue
		}
		er, ok1 := d.find(name, crrScenario, "TCP_CRR")
		up := plane{"upstream", n.backend, "iptables"}.String()
		uvals, same, ok2 := d.upstreamRuns(er, up)
		if !ok1 || !ok2 || !same {
			continue
		}
		ev, uv := Median(er.Values), Median(uvals)
		if uv == 0 {
			continue
		}
		judged = true
		verdict := "met"
		if ev < crrEBPFFactor*uv {
			verdict = "not met"
		}
		how := ""
		if er.Beside != nil {
			how = ", runs alternated on one cluster"
		}
		line := fmt.Sprintf("  - %s: %.2f× (%s vs %s trans/s%s): %s", n.backend, ev/uv, number(ev), number(uv), how, verdict)
		// The Service's endpoint is on the other worker: pod → pod
		// across nodes on the same plane is that connection without a
		// Service, the most any proxy could give.
		if cr, ok := d.find(name, "pod-pod across nodes", "TCP_CRR"); ok && cr.Run == er.Run {
			cv := Median(cr.Values)
			line += fmt.Sprintf("; pod → pod across nodes on this plane, the same connection without a Service and so the most any proxy could reach, is %.2f× (%s trans/s)", cv/uv, number(cv))
		}
		crr = append(crr, line)
	}
	if !judged {
		b.WriteString(" not judged: no nodenet ebpf and upstream iptables TCP_CRR figures through a ClusterIP from the same backend")
		for _, note := range d.Notes {
			if strings.Contains(note, " ebpf ") {
				b.WriteString("; " + note)
				break
			}
		}
		b.WriteString(".\n")
	} else {
		b.WriteString("\n")
		for _, c := range crr {
			b.WriteString(c + "\n")
		}
	}
	return b.String()
}

// upstreamRuns are the runs of the upstream plane up that nodenet's
// result n is compared with: the runs alternated with n's on one cluster
// if n has them (Beside), else up's own result for n's scenario and test;
// same says whether they were measured in the same bench run as n's.
func (d Data) upstreamRuns(n Result, up string) (values []float64, same, ok bool) {
	if n.Beside != nil && n.Beside.Dataplane == up {
		return n.Beside.Values, true, true
	}
	u, ok := d.find(up, n.Scenario, n.Test)
	if !ok {
		return nil, false, false
	}
	return u.Values, u.Run == n.Run, true
}

// planeNoise is a yardstick for the misses: how far apart nodenet's own
// planes of one backend came out on pod → pod within a node, a path the
// proxy mode does not change (the same host routing or bridge carries it
// in every mode), so what separates them is mostly the time each was
// measured at: the largest max/min of their medians over the tests. ""
// with fewer than two such planes.
//
// Not a correction: the node-to-node runs beside each plane looked like
// one (the machine's speed while the plane ran), but they cross that
// plane's own rules on the nodes, so they measure the data plane too.
func planeNoise(tests, planes []string, median func(p, s, t string) (float64, bool)) string {
	const path = "pod-pod same node"
	worst, where := 1.0, ""
	for _, backend := range backends(planes) {
		for _, t := range tests {
			var vals []float64
			for _, name := range planes {
				n, ok := parsePlane(name)
				if !ok || n.impl != "nodenet" || n.backend != backend {
					continue
				}
				if v, ok := median(name, path, t); ok && v > 0 {
					vals = append(vals, v)
				}
			}
			if len(vals) < 2 {
				continue
			}
			if r := slices.Max(vals) / slices.Min(vals); r > worst {
				worst, where = r, backend+" "+t
			}
		}
	}
	if where == "" {
		return ""
	}
	return fmt.Sprintf("  For scale: nodenet's own planes of one backend differ by up to %.0f%% between one another on %s (largest max/min of their medians: %s), a path the proxy mode does not change; what separates them is mostly when each was measured.\n",
		100*(worst-1), path, where)
}

// backends lists the backends of the named planes, in order of appearance.
func backends(planes []string) []string {
	var out []string
	for _, name := range planes {
		if p, ok := parsePlane(name); ok && !slices.Contains(out, p.backend) {
			out = append(out, p.backend)
		}
	}
	return out
}

// rangesNote says whether a median below upstream's is a difference the
// runs show or one inside their scatter: with three runs a side on a
// shared machine, two data planes on one kernel path (a NodePort through
// the same iptables rules) come out in either order.
func rangesNote(overlap bool) string {
	if overlap {
		return " (ranges overlap)"
	}
	return " (every nodenet run below every upstream run)"
}

// aheadNote says, for runs alternated with upstream's, in how many of the
// alternations nodenet's run came out at or above the upstream run beside
// it: the comparison least touched by the machine's drift.
func aheadNote(n Result) string {
	if n.Beside == nil || len(n.Beside.Values) != len(n.Values) {
		return ""
	}
	ahead := 0
	for i, v := range n.Values {
		if v >= n.Beside.Values[i] {
			ahead++
		}
	}
	return fmt.Sprintf("; at or above the upstream run beside it in %d of %d alternations", ahead, len(n.Values))
}

// sharePercent prints a share as a whole percentage, with a tenth (cut,
// not rounded) where rounding would lift a share below limit to limit:
// "95% (not met)" reads as a contradiction, "94.9% (not met)" does not.
func sharePercent(v, limit float64) string {
	if v < limit && math.Round(100*v) >= math.Round(100*limit) {
		return fmt.Sprintf("%.1f%%", math.Floor(1000*v)/10)
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}
