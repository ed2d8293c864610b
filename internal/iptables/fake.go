package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Fake is a stateful in-memory iptables for tests: it applies
// iptables-restore --noflush input atomically, rejects what the kernel
// rejects (rules in or jumps to missing chains, deleting a rule that is not
// there, deleting a non-empty or referenced chain, NAT targets reachable from
// the wrong hook, over-long chain names, ports without a protocol) with the
// kernel tools' messages, and dumps its tables in iptables-save syntax. The
// contract test holds it to the real iptables-nft and iptables-legacy.
type Fake struct {
	mu       sync.Mutex
	tables   map[string]*fakeTable
	Restores int // successful and failed Restore calls
	LastData []byte
}

type fakeTable struct {
	chains map[string]*fakeChain
}

type fakeChain struct {
	builtin bool
	policy  string
	rules   []string
}

var builtinChains = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	"raw":    {"PREROUTING", "OUTPUT"},
}

var builtinTargets = map[string]bool{
	"ACCEPT": true, "DROP": true, "RETURN": true, "REJECT": true, "DNAT": true, "SNAT": true,
	"MASQUERADE": true, "MARK": true, "LOG": true, "CONNMARK": true,
}

// NewFake returns a Fake with empty built-in tables.
func NewFake() *Fake {
	f := &Fake{tables: map[string]*fakeTable{}}
	for t := range builtinChains {
		f.tables[t] = newFakeTable(t)
	}
	return f
}

func newFakeTable(name string) *fakeTable {
	t := &fakeTable{chains: map[string]*fakeChain{}}
	for _, c := range builtinChains[name] {
		t.chains[c] = &fakeChain{builtin: true, policy: "ACCEPT"}
	}
	return t
}

func (t *fakeTable) clone() *fakeTable {
	c := &fakeTable{chains: make(map[string]*fakeChain, len(t.chains))}
	for n, ch := range t.chains {
		cp := *ch
		cp.rules = slices.Clone(ch.rules)
		c.chains[n] = &cp
	}
	return c
}

// fakeRestore names the Fake in its errors.
const fakeRestore = "iptables-restore (fake)"

// restoreError is the Fake's *Error for input line n: the message is the
// one the real tools print, so classify gives the same sentinel.
func restoreError(table string, n int, line, msg string) *Error {
	stderr := fmt.Sprintf("line %d failed: %s", n, msg)
	return &Error{Binary: fakeRestore, Table: table, Line: line, Stderr: stderr, kind: classify(nil, stderr)}
}

func noTable(binary, table string) *Error {
	return &Error{Binary: binary, Table: table, Stderr: "Table does not exist", kind: ErrNotExist}
}

// Restore implements Runner.
func (f *Fake) Restore(_ context.Context, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Restores++
	f.LastData = slices.Clone(data)
	staged := map[string]*fakeTable{}
	var cur *fakeTable
	var curName string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		fail := func(msg string, a ...any) error {
			return restoreError(curName, lineNo, line, fmt.Sprintf(msg, a...))
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "*"):
			curName = line[1:]
			base, ok := f.tables[curName]
			if !ok {
				return fail("table %q does not exist", curName)
			}
			if staged[curName] == nil {
				staged[curName] = base.clone()
			}
			cur = staged[curName]
			continue
		case line == "COMMIT":
			if cur == nil {
				return fail("COMMIT outside a table")
			}
			if err := checkHooks(curName, cur); err != nil {
				return fail("%v", err)
			}
			cur = nil
			continue
		}
		if cur == nil {
			return fail("no table specified")
		}
		if err := cur.apply(line); err != nil {
			return fail("%v", err)
		}
	}
	if cur != nil {
		return restoreError(curName, lineNo, "", "no COMMIT line")
	}
	for n, t := range staged {
		f.tables[n] = t
	}
	return nil
}

func (t *fakeTable) apply(line string) error {
	if strings.HasPrefix(line, ":") {
		fields := strings.Fields(line[1:])
		if len(fields) < 2 {
			return fmt.Errorf("bad chain declaration")
		}
		name := fields[0]
		if len(name) > 28 {
			return fmt.Errorf("chain name %q too long (must be under 29 chars)", name)
		}
		if c, ok := t.chains[name]; ok {
			if c.builtin {
				c.policy = fields[1]
			} else {
				c.rules = nil // --noflush still flushes declared user chains
			}
			return nil
		}
		if fields[1] != "-" {
			return fmt.Errorf("policy on user chain %s", name)
		}
		t.chains[name] = &fakeChain{}
		return nil
	}
	args, err := SplitRule(line)
	if err != nil {
		return err
	}
	if len(args) < 2 {
		return fmt.Errorf("bad command")
	}
	op, name, rest := args[0], args[1], args[2:]
	c, ok := t.chains[name]
	if !ok {
		return fmt.Errorf("chain '%s' does not exist", name)
	}
	switch op {
	case "-X":
		if c.builtin {
			return fmt.Errorf("cannot delete built-in chain %s", name)
		}
		if len(c.rules) > 0 {
			return fmt.Errorf("CHAIN_DEL failed (Directory not empty): chain %s", name)
		}
		for other, oc := range t.chains {
			for _, r := range oc.rules {
				if jumpTarget(r) == name {
					return fmt.Errorf("CHAIN_DEL failed (Device or resource busy): chain %s referenced from %s", name, other)
				}
			}
		}
		delete(t.chains, name)
		return nil
	case "-F":
		c.rules = nil
		return nil
	}
	pos := -1
	if op == "-I" && len(rest) > 0 {
		if n, err := strconv.Atoi(rest[0]); err == nil {
			pos, rest = n-1, rest[1:]
		} else {
			pos = 0
		}
	}
	rule := joinRule(rest)
	if tgt := jumpTarget(rule); tgt != "" && !builtinTargets[tgt] {
		if _, ok := t.chains[tgt]; !ok {
			return fmt.Errorf("chain '%s' does not exist", tgt)
		}
	}
	if err := checkRule(rest); err != nil {
		return err
	}
	switch op {
	case "-A":
		c.rules = append(c.rules, rule)
	case "-I":
		if pos < 0 || pos > len(c.rules) {
			return fmt.Errorf("index of insertion too big")
		}
		c.rules = slices.Insert(c.rules, pos, rule)
	case "-D":
		i := slices.Index(c.rules, rule)
		if i < 0 {
			return fmt.Errorf("bad rule (does a matching rule exist in that chain?)")
		}
		c.rules = slices.Delete(c.rules, i, i+1)
	default:
		return fmt.Errorf("unknown command %s", op)
	}
	return nil
}

// checkRule rejects what iptables' option parser rejects for the options
// this data plane uses.
func checkRule(args []string) error {
	proto := ""
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-p":
			if i+1 < len(args) {
				proto = args[i+1]
				switch proto {
				case "tcp", "udp", "sctp", "icmp", "ipv6-icmp", "all":
				default:
					return fmt.Errorf("unknown protocol %q specified", proto)
				}
			}
		case "--dport", "--sport":
			if proto == "" {
				return fmt.Errorf("unknown option %q", args[i])
			}
			n, err := strconv.Atoi(args[i+1])
			if err != nil || n < 0 || n > 65535 {
				return fmt.Errorf("invalid port/service %q specified", args[i+1])
			}
		case "--to-destination":
			if proto == "" && strings.Contains(args[i+1], ":") && !strings.HasPrefix(args[i+1], "[") {
				return fmt.Errorf("need TCP, UDP, SCTP or DCCP with port specification")
			}
		}
	}
	return nil
}

// natHookLimits: targets only valid from some nat hooks.
var natTargetHooks = map[string][]string{
	"DNAT":       {"PREROUTING", "OUTPUT"},
	"MASQUERADE": {"POSTROUTING"},
	"SNAT":       {"POSTROUTING", "INPUT"},
}

// checkHooks mimics the kernel's check that a chain using a hook-restricted
// target is only reachable from hooks where it is valid.
func checkHooks(table string, t *fakeTable) error {
	if table != "nat" {
		return nil
	}
	for _, hook := range builtinChains["nat"] {
		seen := map[string]bool{}
		var walk func(string) error
		walk = func(name string) error {
			if seen[name] {
				return nil
			}
			seen[name] = true
			c := t.chains[name]
			if c == nil {
				return nil
			}
			for _, r := range c.rules {
				tgt := jumpTarget(r)
				if ok, limited := natTargetHooks[tgt]; limited && !slices.Contains(ok, hook) {
					return fmt.Errorf("RULE_APPEND failed (Invalid argument): rule in chain %s (%s not valid from %s)", name, tgt, hook)
				}
				if !builtinTargets[tgt] && tgt != "" {
					if err := walk(tgt); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if err := walk(hook); err != nil {
			return err
		}
	}
	return nil
}

// jumpTarget returns the -j/-g target of a rule ("" if none).
func jumpTarget(rule string) string {
	args, _ := SplitRule(rule)
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-j" || args[i] == "-g" {
			return args[i+1]
		}
	}
	return ""
}

func joinRule(args []string) string { return strings.Join(args, " ") }

// Save implements Runner.
func (f *Fake) Save(_ context.Context, table string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tables[table]
	if !ok {
		return nil, noTable("iptables-save (fake)", table)
	}
	return []byte(dumpTable(table, t)), nil
}

// Dump returns every table in iptables-save syntax (no header comments).
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sb strings.Builder
	for _, n := range []string{"filter", "nat"} {
		sb.WriteString(dumpTable(n, f.tables[n]))
	}
	return sb.String()
}

func dumpTable(name string, t *fakeTable) string {
	var sb strings.Builder
	sb.WriteString("*" + name + "\n")
	order := slices.Clone(builtinChains[name])
	var user []string
	for n, c := range t.chains {
		if !c.builtin {
			user = append(user, n)
		}
	}
	slices.Sort(user)
	for _, n := range order {
		fmt.Fprintf(&sb, ":%s %s [0:0]\n", n, t.chains[n].policy)
	}
	for _, n := range user {
		fmt.Fprintf(&sb, ":%s - [0:0]\n", n)
	}
	for _, n := range append(order, user...) {
		for _, r := range t.chains[n].rules {
			fmt.Fprintf(&sb, "-A %s %s\n", n, r)
		}
	}
	sb.WriteString("COMMIT\n")
	return sb.String()
}

// ListChain implements Runner.
func (f *Fake) ListChain(_ context.Context, table, chain string) ([]string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tables[table]
	if !ok {
		return nil, false, noTable("iptables (fake)", table)
	}
	c := t.chains[chain]
	if c == nil {
		return nil, false, nil
	}
	return slices.Clone(c.rules), true, nil
}

// Rules returns one chain's rules (nil if it does not exist).
func (f *Fake) Rules(table, chain string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.tables[table].chains[chain]; c != nil {
		return slices.Clone(c.rules)
	}
	return nil
}

// Chains lists a table's chain names, sorted.
func (f *Fake) Chains(table string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.tables[table].chains {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
