package nftables

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/proxy/proxytest"
)

// The tracer walks a proxytest.Packet through the hooks of the Fake's
// table; a dynamic set records affinity.

// tstate is the tracer's state along one branch.
type tstate struct {
	mark     uint32
	dnat     string
	verdict  string // accept, drop, reject (terminal)
	masq     bool
	ret      bool // returning from the current chain
	affinity string
}

type tracer struct {
	t   *testing.T
	tab *FakeTable
	p   proxytest.Packet
}

func priority(s string) int {
	switch s {
	case "dstnat":
		return -100
	case "dstnat - 10":
		return -110
	case "filter":
		return 0
	case "srcnat":
		return 100
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		panic("tracer: priority " + s)
	}
	return n
}

func (tr *tracer) baseChains(hook string) []*FakeChain {
	var out []*FakeChain
	for _, n := range tr.tab.Chains() {
		if c := tr.tab.Chain(n); c.Hook == hook {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b *FakeChain) int { return priority(a.Priority) - priority(b.Priority) })
	return out
}

// trace walks p through the hooks of f's table and returns every outcome.
func trace(t *testing.T, f *Fake, fam string, p proxytest.Packet) []proxytest.Outcome {
	t.Helper()
	tab := f.Table(fam, TableName)
	if tab == nil {
		t.Fatalf("trace: no table %s %s", fam, TableName)
	}
	tr := &tracer{t: t, tab: tab, p: p}
	hooks := []string{"prerouting"}
	if p.Local {
		hooks = []string{"output"}
	}
	var outs []proxytest.Outcome
	var run func(hooks []string, p proxytest.Packet, st tstate)
	run = func(hooks []string, p proxytest.Packet, st tstate) {
		if len(hooks) == 0 {
			outs = append(outs, proxytest.Outcome{Verdict: "ACCEPT", DNAT: st.dnat, Masq: st.masq, Affinity: st.affinity})
			return
		}
		hook := hooks[0]
		states := []tstate{st}
		for _, c := range tr.baseChains(hook) {
			var next []tstate
			for _, s := range states {
				q := p
				applyDNAT(&q, s.dnat)
				if c.Type == "nat" && s.dnat != "" && hook != "postrouting" {
					next = append(next, s) // NAT is decided once per connection
					continue
				}
				for _, r := range tr.chain(c.Name, q, s, 0) {
					r.ret = false
					if r.verdict == "drop" || r.verdict == "reject" {
						outs = append(outs, proxytest.Outcome{Verdict: strings.ToUpper(r.verdict), DNAT: r.dnat})
						continue
					}
					r.verdict = ""
					next = append(next, r)
				}
			}
			states = next
		}
		for _, s := range states {
			q := p
			applyDNAT(&q, s.dnat)
			rest := hooks[1:]
			switch hook {
			case "prerouting":
				if slices.Contains(p.Addrs, q.Dst) {
					rest = append([]string{"input"}, rest...)
				} else {
					rest = append([]string{"forward", "postrouting"}, rest...)
				}
			case "output":
				rest = append([]string{"postrouting"}, rest...)
				if slices.Contains(p.Addrs, q.Dst) {
					rest = append(rest, "input")
				}
			}
			run(rest, p, s)
		}
	}
	run(hooks, p, tstate{})
	return outs
}

func applyDNAT(p *proxytest.Packet, dnat string) {
	if dnat == "" {
		return
	}
	ap := netip.MustParseAddrPort(dnat)
	p.Dst, p.Dport = ap.Addr(), ap.Port()
}

// chain runs the rules of one chain; returned states either carry a
// terminal verdict, or ret (return to the caller), or fell off the end
// (also a return).
func (tr *tracer) chain(name string, p proxytest.Packet, st tstate, depth int) []tstate {
	if depth > jumpStackSize {
		tr.t.Fatalf("trace: jump stack exhausted at %s", name)
	}
	c := tr.tab.Chain(name)
	if c == nil {
		tr.t.Fatalf("trace: missing chain %s", name)
	}
	states := []tstate{st}
	var finished []tstate
	for _, r := range c.Rules {
		var next []tstate
		for _, s := range states {
			for _, o := range tr.eval(strings.Fields(r), p, s, depth) {
				if o.verdict != "" || o.ret {
					finished = append(finished, o)
				} else {
					next = append(next, o)
				}
			}
		}
		states = next
	}
	return append(finished, states...)
}

// eval evaluates the statements of one rule from token i on. A failed match
// returns the state unchanged (continue with the next rule).
func (tr *tracer) eval(w []string, p proxytest.Packet, s tstate, depth int) []tstate {
	t := tr.t
	ip := tr.tab.Family
	for i := 0; i < len(w); i++ {
		tok := w[i]
		switch {
		case (tok == ip) && i+2 < len(w) && (w[i+1] == "daddr" || w[i+1] == "saddr") && w[i+2] == ".":
			key, j := tr.concat(w, i, p)
			if w[j] == "vmap" {
				return tr.vmap(strings.TrimPrefix(w[j+1], "@"), key, p, s, depth)
			}
			set, ok := strings.CutPrefix(w[j], "@")
			if !ok {
				t.Fatalf("trace: concatenation without vmap or set in %v", w)
			}
			if _, in := tr.tab.Elements(set)[key]; !in {
				return []tstate{s}
			}
			i = j
		case tok == "meta" && i+2 < len(w) && w[i+1] == "l4proto" && w[i+2] == ".":
			key, j := tr.concat(w, i, p)
			return tr.vmap(strings.TrimPrefix(w[j+1], "@"), key, p, s, depth)
		case tok == ip && i+2 < len(w):
			addr := p.Src
			if w[i+1] == "daddr" {
				addr = p.Dst
			}
			neg := w[i+2] == "!="
			val := w[i+2]
			i += 2
			if neg {
				val = w[i+1]
				i++
			}
			var ok bool
			if set, isSet := strings.CutPrefix(val, "@"); isSet {
				if el := tr.tab.Elements(set); el != nil && len(el) > 0 {
					_, ok = el[addr.String()]
				}
				ok = ok || slices.Contains(p.Affinity[set], addr)
			} else if strings.Contains(val, "/") {
				ok = netip.MustParsePrefix(val).Contains(addr)
			} else {
				ok = netip.MustParseAddr(val) == addr
			}
			if ok == neg {
				return []tstate{s}
			}
		case (tok == "tcp" || tok == "udp" || tok == "sctp") && i+2 < len(w) && w[i+1] == "dport":
			n, _ := strconv.Atoi(w[i+2])
			if tok != p.Proto || uint16(n) != p.Dport {
				return []tstate{s}
			}
			i += 2
		case tok == "meta" && w[i+1] == "l4proto":
			if w[i+2] != p.Proto {
				return []tstate{s}
			}
			i += 2
		case tok == "fib":
			// fib daddr|saddr type local
			local := slices.Contains(p.Addrs, p.Dst)
			if w[i+1] == "saddr" {
				local = p.Local || slices.Contains(p.Addrs, p.Src)
			}
			if !local {
				return []tstate{s}
			}
			i += 3
		case tok == "ct" && w[i+1] == "status" && w[i+2] == "dnat":
			if s.dnat == "" {
				return []tstate{s}
			}
			i += 2
		case tok == "ct":
			i += 2 // ct state new: tracing first packets
		case tok == "numgen":
			// numgen random mod K 0 → this endpoint, or the rest
			rest := w[i+5:]
			return append([]tstate{s}, tr.eval(rest, p, s, depth)...)
		case tok == "meta" && w[i+1] == "mark" && w[i+2] == "set":
			v, _ := strconv.ParseUint(w[i+6], 0, 32)
			if w[i+5] == "|" {
				s.mark |= uint32(v)
			} else {
				s.mark ^= uint32(v)
			}
			i += 6
		case tok == "meta" && w[i+1] == "mark" && w[i+2] == "&":
			m, _ := strconv.ParseUint(w[i+3], 0, 32)
			v, _ := strconv.ParseUint(w[i+5], 0, 32)
			if s.mark&uint32(m) != uint32(v) {
				return []tstate{s}
			}
			i += 5
		case tok == "update":
			s.affinity = strings.TrimPrefix(w[i+1], "@")
			i += 4 // update @set { ip saddr }
			if w[i] != "saddr" || w[i+1] != "}" {
				t.Fatalf("trace: bad update in %v", w)
			}
			i++
		case tok == "jump" || tok == "goto":
			return tr.verdict(tok+" "+w[i+1], p, s, depth)
		case tok == "return" || tok == "accept" || tok == "drop":
			return tr.verdict(tok, p, s, depth)
		case tok == "reject":
			s.verdict = "reject"
			return []tstate{s}
		case tok == "dnat" && i+3 < len(w) && w[i+3] == "numgen":
			// dnat ip to numgen random mod N [offset B] map @endpoints:
			// one branch per key B … B+N-1.
			n := mustAtoi(t, w[i+6])
			j, base := i+7, 0
			if w[j] == "offset" {
				base, j = mustAtoi(t, w[j+1]), j+2
			}
			elems := tr.tab.Elements(strings.TrimPrefix(w[j+1], "@"))
			var out []tstate
			for slot := base; slot < base+n; slot++ {
				v, ok := elems[strconv.Itoa(slot)]
				if !ok {
					t.Fatalf("trace: %s has no key %d in %v", w[j+1], slot, w)
				}
				addr, port, _ := strings.Cut(v, " . ")
				b := s
				b.dnat = netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(mustAtoi(t, port))).String()
				b.verdict = "accept"
				out = append(out, b)
			}
			return out
		case tok == "dnat":
			s.dnat = w[i+2]
			s.verdict = "accept"
			return []tstate{s}
		case tok == "masquerade":
			s.masq = true
			s.verdict = "accept"
			return []tstate{s}
		default:
			t.Fatalf("trace: unknown statement %q in %v", tok, w)
		}
	}
	return []tstate{s}
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("trace: %q is not a number", s)
	}
	return n
}

// concat evaluates "a . b . c" (up to "vmap" or "@set") into a key.
func (tr *tracer) concat(w []string, i int, p proxytest.Packet) (string, int) {
	var parts []string
	for ; i < len(w) && w[i] != "vmap" && !strings.HasPrefix(w[i], "@"); i++ {
		switch {
		case w[i] == ".":
		case w[i] == tr.tab.Family && w[i+1] == "daddr":
			parts = append(parts, p.Dst.String())
			i++
		case w[i] == tr.tab.Family && w[i+1] == "saddr":
			parts = append(parts, p.Src.String())
			i++
		case w[i] == "meta" && w[i+1] == "l4proto":
			parts = append(parts, p.Proto)
			i++
		case w[i] == "th" && w[i+1] == "dport":
			parts = append(parts, strconv.Itoa(int(p.Dport)))
			i++
		default:
			tr.t.Fatalf("trace: unknown key part %q in %v", w[i], w)
		}
	}
	return strings.Join(parts, " . "), i
}

func (tr *tracer) vmap(set, key string, p proxytest.Packet, s tstate, depth int) []tstate {
	v, ok := tr.tab.Elements(set)[key]
	if !ok {
		return []tstate{s}
	}
	return tr.verdict(v, p, s, depth)
}

func (tr *tracer) verdict(v string, p proxytest.Packet, s tstate, depth int) []tstate {
	w := strings.Fields(v)
	switch w[0] {
	case "return":
		s.ret = true
		return []tstate{s}
	case "accept", "drop":
		s.verdict = w[0]
		return []tstate{s}
	}
	var out []tstate
	for _, r := range tr.chain(w[1], p, s, depth+1) {
		if r.verdict == "" {
			// The callee returned: jump continues here, goto returns
			// from this chain too.
			r.ret = w[0] == "goto"
		}
		out = append(out, r)
	}
	return out
}
