package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/nodenet/nodenet/internal/loadgen"
)

// readReports parses the CRI-format container logs of the loadgen pods
// (one JSON Report per line; a long line arrives as P pieces ending with
// an F record).
func readReports(files []string) ([]loadgen.Report, error) {
	var out []loadgen.Report
	for _, f := range files {
		rs, err := readReportFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

func readReportFile(path string) ([]loadgen.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []loadgen.Report
	var line strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		// <time> <stream> <P|F> <content>
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) < 4 || parts[1] != "stdout" {
			continue
		}
		line.WriteString(parts[3])
		if parts[2] != "F" {
			continue
		}
		var r loadgen.Report
		if err := json.Unmarshal([]byte(line.String()), &r); err != nil {
			return nil, fmt.Errorf("%s: report %.80q: %w", path, line.String(), err)
		}
		line.Reset()
		out = append(out, r)
	}
	return out, sc.Err()
}

// loadLogs are the log files of every run of the loadgen containers in
// the cluster in dir.
func loadLogs(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, "nodes", "*", "pods", "logs", workloadNS+"_"+clientPrefix+"*", loadContainer, "*.log"))
}

// Tally is the load during one window.
type Tally struct {
	Attempts map[string]int
	Failed   map[string]int
	Errors   map[string]int // distinct error texts (the report's notes)
	// LastFailure is the time of the window's last failure (zero: none).
	LastFailure time.Time
	// MaxStall is the worst lateness of the clients' schedules: CPU
	// starvation, which fails requests by timeout with no fault at all.
	MaxStall time.Duration
}

// tally attributes reports and failures to [from, to): a failure, as an
// attempt and as a failure, by its own time (when the attempt started); a
// second's successful attempts by the report's time. A report counts the
// attempts that completed in its second, failed ones included, and a failed
// attempt can complete long after it started (a 1 s timeout, and more on a
// stalled client): counting a report's attempts whole by the report's time
// but its failures by their own put failures and their attempts in
// different windows, and a window could show more failures than attempts.
func tally(reps []loadgen.Report, from, to time.Time) Tally {
	t := Tally{Attempts: map[string]int{}, Failed: map[string]int{}, Errors: map[string]int{}}
	in := func(at time.Time) bool { return !at.Before(from) && at.Before(to) }
	for _, r := range reps {
		if in(time.UnixMilli(r.T)) {
			failed := map[string]int{}
			for _, f := range r.Failures {
				failed[f.Kind]++
			}
			for k, n := range r.Attempts {
				t.Attempts[k] += max(n-failed[k], 0)
			}
			t.MaxStall = max(t.MaxStall, time.Duration(r.StallMs)*time.Millisecond)
		}
		for _, f := range r.Failures {
			ft := time.UnixMilli(f.T)
			if !in(ft) {
				continue
			}
			t.Attempts[f.Kind]++
			t.Failed[f.Kind]++
			t.Errors[f.Kind+": "+shortErr(f.Err)]++
			if ft.After(t.LastFailure) {
				t.LastFailure = ft
			}
		}
	}
	return t
}

// connAddrs matches the local->remote pair Go puts into socket errors.
var connAddrs = regexp.MustCompile(`(read|write) (tcp|udp) [0-9.:]+->[0-9.:]+:`)

// shortErr drops the ephemeral addresses that make every error text
// unique, so equal errors group in the report's notes.
func shortErr(s string) string { return connAddrs.ReplaceAllString(s, "$1 $2:") }
