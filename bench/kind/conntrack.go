package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// conntrackCounters are the kernel's per-CPU conntrack statistics
// (`conntrack -S`) that say a connection's packets were refused or
// mis-tracked; the benchmark records how much each grew on the client's
// and the server's node over the TCP_CRR runs, so a collapse of
// connections/s points at its cause in the report rather than a guess.
var conntrackCounters = []string{"invalid", "insert_failed", "drop", "early_drop", "clash_resolve", "error"}

// parseConntrackStats sums `conntrack -S` lines ("cpu=0 found=0
// invalid=3 …") over the CPUs, keeping conntrackCounters.
func parseConntrackStats(out string) (map[string]int, error) {
	keep := map[string]bool{}
	for _, c := range conntrackCounters {
		keep[c] = true
	}
	sum := map[string]int{}
	lines := 0
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "cpu=") {
			continue
		}
		lines++
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok || !keep[k] {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("conntrack -S: %q: %w", f, err)
			}
			sum[k] += n
		}
	}
	if lines == 0 {
		return nil, fmt.Errorf("conntrack -S printed no cpu= lines: %q", out)
	}
	return sum, nil
}

// conntrackStats reads a node's conntrack statistics.
func conntrackStats(ctx context.Context, node string) (map[string]int, error) {
	out, err := docker{bin: "docker"}.run(ctx, "exec", node, "conntrack", "-S")
	if err != nil {
		return nil, err
	}
	return parseConntrackStats(out)
}

// conntrackGrowth is what grew of conntrackCounters between two readings
// of a node's statistics: "node: invalid +12, drop +3" (empty when
// nothing grew).
func conntrackGrowth(node string, before, after map[string]int) string {
	return growth(node, conntrackCounters, before, after)
}

// growth lists the counters (in their order) that grew between two
// readings of a node's counters: "node: a +12, b +3" (empty when none did).
func growth(node string, counters []string, before, after map[string]int) string {
	var parts []string
	for _, c := range counters {
		if d := after[c] - before[c]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s +%d", c, d))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return node + ": " + strings.Join(parts, ", ")
}

// counterTally is, per node, how much each counter grew over the runs
// watched so far.
type counterTally map[string]map[string]int

// watch runs run between two readings of each node's counters (read) and
// adds what they grew by to t.
func (t counterTally) watch(ctx context.Context, nodes []string,
	read func(ctx context.Context, node string) (map[string]int, error), run func() error) error {
	before := map[string]map[string]int{}
	for _, n := range nodes {
		s, err := read(ctx, n)
		if err != nil {
			return err
		}
		before[n] = s
	}
	if err := run(); err != nil {
		return err
	}
	for _, n := range nodes {
		after, err := read(ctx, n)
		if err != nil {
			return err
		}
		if t[n] == nil {
			t[n] = map[string]int{}
		}
		for c, v := range after {
			t[n][c] += v - before[n][c]
		}
	}
	return nil
}

// lines is what grew of the counters named, one entry per node in name
// order ("node: a +12, b +3"; nodes where none grew left out).
func (t counterTally) lines(counters []string) []string {
	nodes := make([]string, 0, len(t))
	for n := range t {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var grew []string
	for _, n := range nodes {
		if g := growth(n, counters, nil, t[n]); g != "" {
			grew = append(grew, g)
		}
	}
	return grew
}
