package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nodenet/nodenet/internal/loadgen"
)

// Line is one fault's row of the report.
type Line struct {
	Fault    string
	Class    targetClass
	Skipped  string // why the fault did not run here
	Baseline bool   // the window without a fault
	Err      string // the fault could not be injected or did not converge
	Outcome
	Tally
	// Converge is from the end of the fault's cause (Restored) until every
	// check was green and the load failed no more; negative: never.
	Converge time.Duration
	// Programming is what the proxies observed of endpoint programming
	// latency in the window (from injection to green plus settle).
	Programming histogram
}

// settle is how long after a fault's checks are green its window stays
// open, so that late failures still count against it.
const settle = 3 * time.Second

// window is the time a fault's failures are attributed to.
func (o Outcome) window(timeout time.Duration) (time.Time, time.Time) {
	end := o.Green
	if end.IsZero() {
		end = o.Start.Add(timeout)
	}
	return o.Start, end.Add(settle)
}

// measure fills in the load figures of a line from the reports.
func (l *Line) measure(reps []loadgen.Report, timeout time.Duration) {
	if l.Skipped != "" || l.Start.IsZero() {
		return
	}
	from, to := l.window(timeout)
	l.Tally = tally(reps, from, to)
	if l.Baseline {
		return
	}
	if l.Green.IsZero() || l.Restored.IsZero() {
		l.Converge = -1
		return
	}
	at := l.Green
	if l.LastFailure.After(at) {
		at = l.LastFailure
	}
	l.Converge = max(at.Sub(l.Restored), 0)
}

func (l *Line) newFailed() int {
	return l.Failed[loadgen.KindNew("clusterip")] + l.Failed[loadgen.KindNew("nodeport")] + l.Failed[loadgen.KindNew("long-dial")]
}

// misses lists the targets the line does not meet.
func (l *Line) misses() []string {
	if l.Skipped != "" {
		return nil
	}
	var out []string
	if l.Err != "" {
		out = append(out, "fault failed")
	}
	if l.Class == classOther {
		return out
	}
	if n := l.Failed[loadgen.KindLong]; n > 0 {
		out = append(out, fmt.Sprintf("%d broken established (target 0)", n))
	}
	if l.Class == classDataDaemon && l.newFailed() > 0 {
		out = append(out, fmt.Sprintf("%d failed new connections (target 0)", l.newFailed()))
	}
	if l.Converge < 0 || l.Converge >= 2*time.Second {
		out = append(out, "converged ≥ 2 s after the daemon came back")
	}
	return out
}

func ratio(failed, attempts int) string {
	if attempts == 0 {
		return fmt.Sprintf("%d / 0", failed)
	}
	return fmt.Sprintf("%d / %d (%.2f%%)", failed, attempts, 100*float64(failed)/float64(attempts))
}

func secs(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// Meta is the report's header.
type Meta struct {
	Commit, Backend, ProxyMode string
	Load                       Load
	Date                       time.Time
	Duration                   time.Duration
}

// writeReport renders the Markdown report.
func writeReport(w io.Writer, m Meta, base Line, lines []Line, leaks []Leak, timeout time.Duration) {
	fmt.Fprintf(w, "\n## Backend %s, proxy %s\n\n", m.Backend, m.ProxyMode)
	fmt.Fprintf(w, "%s, commit %s, %s. 3 nodes; faults hit node-1 unless named otherwise.\n\n",
		m.Date.UTC().Format("2006-01-02 15:04 UTC"), m.Commit, m.Duration.Round(time.Second))
	fmt.Fprintf(w, "Load (two `nodenet loadgen` client pods, on node-1 and node-2, each half of it): %d new TCP connections/s to the ClusterIP and %d/s to a NodePort (client on node-1 → node-2's, client on node-2 → node-1's), %d long-lived TCP connections through the ClusterIP exchanging a line every 100 ms, %d UDP requests/s (one socket each, DNS-like) to the ClusterIP; 1 s timeout for every answer. Endpoints: %d echo pods, %d per node; every echo pod drains for %s when deleted (a preStop sleep before its SIGTERM), as a server behind a Service should.\n\n",
		m.Load.Rate, m.Load.Rate, m.Load.Long, m.Load.UDPRate, 3*echoPerNode, echoPerNode, drainFor)
	fmt.Fprintf(w, "A fault's window runs from its injection until its checks are green plus %s; failures count in the window their own timestamp falls in. *Fault ends*: when its cause ended (the killed daemon runs again; churn stops; at once for a change by hand). *Converged*: from then until every check was green and the load's last failure in the window. *Client stall*: the worst lateness of the load generators' own schedules in the window — on a machine short of CPU a starved client fails requests by timeout with nothing wrong in the network, so failures in a window with a stall near or above the 1 s timeout are at least partly the machine's. *Endpoint programming*: the proxies' `kubeproxy_network_programming_duration_seconds` over the window, every node summed, as bucket bounds — how long an EndpointSlice change took from the controller seeing its cause to the node's kernel; a deleted pod drains for %s, so a change slower than that sends new connections to a stopped server. Targets (issue 17): 0 broken established connections for any daemon kill -9 and API server restart; 0 failed new connections for proxy and flanneld kill -9; convergence < 2 s after a daemon comes back; 0 leaks, 0 duplicates.\n\n", settle, drainFor)
	fmt.Fprintf(w, "| Fault | new → ClusterIP failed | new → NodePort failed | broken established | UDP lost | fault ends | converged | client stall | endpoint programming | targets |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range append([]Line{base}, lines...) {
		if l.Skipped != "" {
			fmt.Fprintf(w, "| %s | – | – | – | – | – | – | – | – | not run: %s |\n", l.Fault, l.Skipped)
			continue
		}
		target := "–"
		if l.Class != classOther || l.Err != "" {
			target = "met"
			if ms := l.misses(); len(ms) > 0 {
				target = "**missed**: " + strings.Join(ms, "; ")
			}
		}
		ends, conv := "–", "–"
		if !l.Restored.IsZero() {
			ends = "+" + secs(l.Restored.Sub(l.Start))
		}
		if !l.Baseline {
			conv = secs(l.Converge)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", l.Fault,
			ratio(l.Failed[loadgen.KindNew("clusterip")], l.Attempts[loadgen.KindNew("clusterip")]),
			ratio(l.Failed[loadgen.KindNew("nodeport")], l.Attempts[loadgen.KindNew("nodeport")]),
			l.Failed[loadgen.KindLong],
			ratio(l.Failed[loadgen.KindUDP], l.Attempts[loadgen.KindUDP]),
			ends, conv, secs(l.MaxStall), l.Programming, target)
	}
	fmt.Fprintf(w, "\n### After the suite: leaks and duplicates\n\n| Check | Found | Examples |\n|---|---|---|\n")
	for _, lk := range leaks {
		ex := lk.Found
		if len(ex) > 5 {
			ex = append(ex[:5:5], "…")
		}
		fmt.Fprintf(w, "| %s | %d | %s |\n", lk.What, len(lk.Found), strings.Join(ex, "; "))
	}
	fmt.Fprintf(w, "\n### Notes per fault\n\n")
	for _, l := range append([]Line{base}, lines...) {
		if l.Skipped != "" {
			continue
		}
		fmt.Fprintf(w, "- **%s**", l.Fault)
		if l.Note != "" {
			fmt.Fprintf(w, " — %s", l.Note)
		}
		if l.Err != "" {
			fmt.Fprintf(w, " — error: %s", l.Err)
		}
		if !l.Green.IsZero() {
			fmt.Fprintf(w, "; checks green +%s", secs(l.Green.Sub(l.Start)))
		}
		fmt.Fprintln(w)
		for _, e := range topErrors(l.Errors, 4) {
			fmt.Fprintf(w, "  - %s\n", e)
		}
	}
}

// topErrors are the most frequent error texts, "N× text".
func topErrors(errs map[string]int, n int) []string {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if errs[keys[i]] != errs[keys[j]] {
			return errs[keys[i]] > errs[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%d× %s", errs[k], k))
	}
	return out
}
