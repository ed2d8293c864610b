package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/loadgen"
)

func TestReadReportFileJoinsPartialLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	log := `2026-12-02T00:00:00.000000000Z stdout F {"t":1000,"attempts":{"udp":3},"open":2}
2026-12-02T00:00:01.000000000Z stderr F some warning
2026-12-02T00:00:01.000000000Z stdout P {"t":2000,"attempts":{"udp":2},
2026-12-02T00:00:01.000000000Z stdout F "failures":[{"t":1500,"kind":"udp","err":"read udp 10.244.1.2:4000->10.96.0.9:9001: i/o timeout"}],"open":2}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	reps, err := readReportFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 || reps[1].T != 2000 || len(reps[1].Failures) != 1 || reps[0].Attempts["udp"] != 3 {
		t.Fatalf("reports %+v", reps)
	}
	if got := shortErr(reps[1].Failures[0].Err); got != "read udp: i/o timeout" {
		t.Errorf("shortErr: %q", got)
	}
}

func TestTallyAttributesByTimestamp(t *testing.T) {
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	reps := []loadgen.Report{
		{T: 1000, Attempts: map[string]int{"udp": 10}, Failures: []loadgen.Failure{{T: 900, Kind: "udp", Err: "x"}}},
		{T: 2000, Attempts: map[string]int{"udp": 10}, Failures: []loadgen.Failure{{T: 1200, Kind: "udp", Err: "x"}, {T: 1999, Kind: "long", Err: "y"}}},
		{T: 3000, Attempts: map[string]int{"udp": 10}},
	}
	got := tally(reps, at(1000), at(2500))
	// udp: 9 + 9 successes by their reports' time, the failure at 1200 by
	// its own; the one at 900 belongs to the window before.
	if got.Attempts["udp"] != 19 || got.Failed["udp"] != 1 || got.Failed["long"] != 1 || !got.LastFailure.Equal(at(1999)) {
		t.Errorf("tally %+v", got)
	}
}

func TestMeasureAndTargets(t *testing.T) {
	start := time.UnixMilli(10_000)
	reps := []loadgen.Report{{T: 11_000, Attempts: map[string]int{loadgen.KindNew("clusterip"): 100, loadgen.KindLong: 50},
		Failures: []loadgen.Failure{{T: 10_800, Kind: loadgen.KindNew("clusterip"), Err: "refused"}}}}
	l := Line{Fault: "kill -9 proxy", Class: classDataDaemon, Outcome: Outcome{Start: start, Restored: start.Add(500 * time.Millisecond), Green: start.Add(600 * time.Millisecond)}}
	l.measure(reps, time.Minute)
	if l.Converge != 300*time.Millisecond {
		t.Errorf("converge %s, want 300ms (last failure after green)", l.Converge)
	}
	if ms := l.misses(); len(ms) != 1 || !strings.Contains(ms[0], "1 failed new connections") {
		t.Errorf("misses %v", ms)
	}
	never := Line{Fault: "f", Class: classDaemonKill, Outcome: Outcome{Start: start, Restored: start}}
	never.measure(reps, time.Minute)
	if never.Converge >= 0 || len(never.misses()) != 1 {
		t.Errorf("unconverged line: converge %s misses %v", never.Converge, never.misses())
	}
	var b bytes.Buffer
	writeReport(&b, Meta{Backend: "host-gw", ProxyMode: "iptables"}, Line{Fault: "baseline", Baseline: true},
		[]Line{l, never, {Fault: "fdb", Skipped: "not with host-gw"}}, []Leak{{What: "leaked IPs", Found: []string{"a"}}}, time.Minute)
	for _, want := range []string{"| kill -9 proxy | 1 / 100 (1.00%) |", "**missed**: 1 failed new connections", "| f |", "never", "not run: not with host-gw", "| leaked IPs | 1 | a |", "1× new-clusterip: refused"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestParseSample(t *testing.T) {
	name, labels, v, ok := parseSample(`apiserver_request_total{code="200",resource="pods",verb="LIST"} 7`)
	if !ok || name != "apiserver_request_total" || labels["verb"] != "LIST" || labels["resource"] != "pods" || v != 7 {
		t.Errorf("got %q %v %v %v", name, labels, v, ok)
	}
	if _, _, v, ok := parseSample("apiserver_registered_watchers 3"); !ok || v != 3 {
		t.Errorf("unlabelled sample: %v %v", v, ok)
	}
	for _, l := range []string{"", "# HELP x y", "x{a=\"b\"} nan-ish"} {
		if _, _, _, ok := parseSample(l); ok {
			t.Errorf("%q parsed as a sample", l)
		}
	}
}

func TestDNATTargetPattern(t *testing.T) {
	out := `-A NODENET-SEP-X -p tcp -m tcp -j DNAT --to-destination 10.244.1.5:9000
		ip daddr 10.96.0.1 tcp dport 443 dnat ip to 10.244.0.7:9000
		meta l4proto udp dnat to 10.244.2.9:53
		-A FOO -j DNAT --to-destination 172.30.0.11:6443`
	var got []string
	for _, m := range dnatTarget.FindAllStringSubmatch(out, -1) {
		got = append(got, m[1])
	}
	if strings.Join(got, " ") != "10.244.1.5 10.244.0.7 10.244.2.9" {
		t.Errorf("DNAT targets %v", got)
	}
}

// A stalled client reports its timed-out attempts late: the failures
// belong to the window they started in, and so do their attempts, so no
// window ever shows more failures than attempts (the churn line once read
// "33761 / 32101 (105.17%)").
func TestTallyNeverMoreFailuresThanAttempts(t *testing.T) {
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	kind := loadgen.KindNew("clusterip")
	var late []loadgen.Failure
	for ms := int64(0); ms < 2000; ms += 10 {
		late = append(late, loadgen.Failure{T: 8000 + ms, Kind: kind, Err: "i/o timeout"})
	}
	reps := []loadgen.Report{
		{T: 9000, Attempts: map[string]int{kind: 100}},
		{T: 10_000, Attempts: map[string]int{kind: 100}},
		// The client stalled: 200 attempts started in [8 s, 10 s) failed
		// and were reported at 13 s, with 50 successes of that second.
		{T: 13_000, Attempts: map[string]int{kind: 250}, Failures: late},
	}
	for _, w := range [][2]int64{{8000, 10_000}, {8000, 11_000}, {10_000, 14_000}, {0, 20_000}} {
		got := tally(reps, at(w[0]), at(w[1]))
		if got.Failed[kind] > got.Attempts[kind] {
			t.Errorf("window %v: %d failed of %d attempts", w, got.Failed[kind], got.Attempts[kind])
		}
	}
	all := tally(reps, at(0), at(20_000))
	if all.Attempts[kind] != 450 || all.Failed[kind] != 200 {
		t.Errorf("whole run: %d failed of %d, want 200 of 450", all.Failed[kind], all.Attempts[kind])
	}
	first := tally(reps, at(8000), at(10_000))
	if first.Attempts[kind] != 300 || first.Failed[kind] != 200 {
		t.Errorf("[8 s, 10 s): %d failed of %d, want 200 of 300 (100 reported at 9 s, the 200 failures started in it)", first.Failed[kind], first.Attempts[kind])
	}
}
