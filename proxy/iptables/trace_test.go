package iptables

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// The tracer walks a proxytest.Packet through the Fake's rules (nat, then
// filter); a recent list records affinity.

type traceState struct {
	mark    uint32
	dnat    string
	verdict string
	recent  string
	done    bool // terminal target reached in this table
}

// trace walks p through nat then filter of f and returns every outcome.
func trace(t *testing.T, f *ipt.Fake, p proxytest.Packet) []proxytest.Outcome {
	t.Helper()
	hook := "PREROUTING"
	if p.Local {
		hook = "OUTPUT"
	}
	var outs []proxytest.Outcome
	for _, st := range walk(t, f, "nat", hook, p, traceState{}) {
		dst := p.Dst
		if st.dnat != "" {
			dst = netip.MustParseAddrPort(st.dnat).Addr()
		}
		fhook := "FORWARD"
		switch {
		case p.Local:
			fhook = "OUTPUT"
		case slices.Contains(p.Addrs, dst):
			fhook = "INPUT"
		}
		q := p
		q.Dst = dst
		if st.dnat != "" {
			q.Dport = netip.MustParseAddrPort(st.dnat).Port()
		}
		for _, fs := range walk(t, f, "filter", fhook, q, traceState{mark: st.mark}) {
			v := fs.verdict
			if v == "" {
				v = "ACCEPT"
			}
			outs = append(outs, proxytest.Outcome{DNAT: st.dnat, Masq: st.mark&0x4000 != 0, Verdict: v, Affinity: st.recent})
		}
	}
	return outs
}

func walk(t *testing.T, f *ipt.Fake, table, chain string, p proxytest.Packet, st traceState) []traceState {
	t.Helper()
	rules := f.Rules(table, chain)
	states := []traceState{st}
	var finished []traceState
	for _, r := range rules {
		var next []traceState
		for _, s := range states {
			args, err := ipt.SplitRule(r)
			if err != nil {
				t.Fatalf("trace: %v", err)
			}
			matchIdx, targetIdx := splitTarget(args)
			yes, no := evalMatches(t, args[:matchIdx], p, s.mark)
			if no {
				next = append(next, s) // branch where the rule does not match
			}
			if !yes {
				continue
			}
			if targetIdx < 0 {
				next = append(next, s)
				continue
			}
			if i := slices.Index(args, "--set"); i >= 0 {
				for j := i; j+1 < len(args); j++ {
					if args[j] == "--name" {
						s.recent = args[j+1]
					}
				}
			}
			for _, r := range applyTarget(t, f, table, args[targetIdx:], p, s) {
				if r.done {
					finished = append(finished, r)
				} else if r.verdict == "RETURN" {
					r.verdict = ""
					finished = append(finished, r)
				} else {
					next = append(next, r)
				}
			}
		}
		states = next
	}
	return append(finished, states...)
}

// splitTarget returns where the matches end and the -j starts (-1: none).
func splitTarget(args []string) (int, int) {
	for i, a := range args {
		if a == "-j" {
			return i, i + 1
		}
	}
	return len(args), -1
}

// evalMatches reports whether the packet can match (yes) and can not match
// (no); random matches allow both.
func evalMatches(t *testing.T, args []string, p proxytest.Packet, mark uint32) (yes, no bool) {
	t.Helper()
	match := true
	random := false
	neg := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		arg := func() string { i++; return args[i] }
		var ok bool
		switch a {
		case "!":
			neg = true
			continue
		case "-s", "-d":
			pf := netip.MustParsePrefix(arg())
			addr := p.Src
			if a == "-d" {
				addr = p.Dst
			}
			ok = pf.Contains(addr)
		case "-p":
			ok = arg() == p.Proto
		case "-m":
			arg()
			continue
		case "--comment":
			arg()
			continue
		case "--dport":
			n, _ := strconv.Atoi(arg())
			ok = uint16(n) == p.Dport
		case "--dst-type", "--src-type":
			addr := p.Src
			if a == "--dst-type" {
				addr = p.Dst
			}
			isLocal := slices.Contains(p.Addrs, addr) || (a == "--src-type" && p.Local && !addr.IsValid())
			if a == "--src-type" && p.Local {
				isLocal = true
			}
			ok = arg() == "LOCAL" && isLocal
		case "--mark":
			v, m, _ := strings.Cut(arg(), "/")
			vv, _ := strconv.ParseUint(v, 0, 32)
			mm, _ := strconv.ParseUint(m, 0, 32)
			ok = mark&uint32(mm) == uint32(vv)
		case "--ctstate":
			ok = strings.Contains(arg(), "NEW")
		case "--mode":
			arg()
			continue
		case "--probability":
			arg()
			random = true
			continue
		case "--rcheck", "--update":
			// --rcheck/--update --seconds N --reap --name X --mask M --rsource
			name := ""
			for j := i; j < len(args); j++ {
				if args[j] == "--name" {
					name = args[j+1]
				}
			}
			ok = slices.Contains(p.Affinity[name], p.Src)
		case "--seconds", "--name", "--mask":
			arg()
			continue
		case "--reap", "--rsource", "--set":
			continue
		default:
			t.Fatalf("tracer: unknown match option %q in %v", a, args)
		}
		if neg {
			ok = !ok
			neg = false
		}
		match = match && ok
	}
	if !match {
		return false, true
	}
	if random {
		return true, true
	}
	return true, false
}

func applyTarget(t *testing.T, f *ipt.Fake, table string, args []string, p proxytest.Packet, s traceState) []traceState {
	t.Helper()
	switch args[0] {
	case "ACCEPT", "DROP", "REJECT":
		s.verdict, s.done = args[0], true
		return []traceState{s}
	case "RETURN":
		s.verdict = "RETURN"
		return []traceState{s}
	case "MARK":
		// --set-xmark V/M
		v, m, _ := strings.Cut(args[2], "/")
		vv, _ := strconv.ParseUint(v, 0, 32)
		mm, _ := strconv.ParseUint(m, 0, 32)
		s.mark = (s.mark &^ uint32(mm)) ^ uint32(vv)
		return []traceState{s}
	case "DNAT":
		s.dnat = args[2]
		s.done = true
		return []traceState{s}
	case "MASQUERADE":
		return []traceState{s}
	}
	var out []traceState
	for _, r := range walk(t, f, table, args[0], p, s) {
		if r.verdict == "RETURN" {
			r.verdict = ""
		}
		out = append(out, r)
	}
	return out
}
