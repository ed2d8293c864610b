package nftables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nodenet/nodenet/internal/nlmsg"
)

// Fake is a stateful in-memory nftables for tests. It applies the nft
// command language this package writes as one atomic transaction, rejects
// what the kernel rejects (ENOENT for jumps, set references and elements
// naming missing objects and for deleting what is not there, EEXIST for an
// element mapped to another verdict, EBUSY for deleting a chain or set still
// referenced, EOPNOTSUPP for NAT/reject reachable from the wrong hook,
// EMLINK for jump loops) and lists tables in `nft list table` syntax. The
// same contract test runs against it and against nft in a throwaway
// namespace.
type Fake struct {
	mu     sync.Mutex
	tables map[string]*FakeTable // "ip nodenet-proxy"
	order  []string

	Applies    int // Apply calls, successful or not
	Batches    int // Batch calls, successful or not
	LastScript []byte
}

// FakeTable is one table of a Fake.
type FakeTable struct {
	Family, Name string
	sets         map[string]*fakeSet
	chains       map[string]*FakeChain
	setOrder     []string
	chainOrder   []string
}

type fakeSet struct {
	name                      string
	isMap                     bool
	typeof                    bool // typ is "typeof" expressions, not type names
	typ, size, flags, timeout string
	elems                     map[string]string // key → value ("" in sets)
}

// FakeChain is one chain; Type/Hook/Priority/Policy are set on base chains.
type FakeChain struct {
	Name                         string
	Type, Hook, Priority, Policy string
	Rules                        []string
}

// NewFake returns an empty Fake.
func NewFake() *Fake { return &Fake{tables: map[string]*FakeTable{}} }

func (t *FakeTable) clone() *FakeTable {
	c := &FakeTable{Family: t.Family, Name: t.Name, sets: make(map[string]*fakeSet, len(t.sets)),
		chains: make(map[string]*FakeChain, len(t.chains)), setOrder: slices.Clone(t.setOrder), chainOrder: slices.Clone(t.chainOrder)}
	for n, s := range t.sets {
		cp := *s
		cp.elems = make(map[string]string, len(s.elems))
		for k, v := range s.elems {
			cp.elems[k] = v
		}
		c.sets[n] = &cp
	}
	for n, ch := range t.chains {
		cp := *ch
		cp.Rules = slices.Clone(ch.Rules)
		c.chains[n] = &cp
	}
	return c
}

var errFake = errors.New("exit status 1")

// fakeErr renders an error like nft does: the errno message and the input
// line.
func fakeErr(lineNo int, line, msg string) error {
	return &Error{Stderr: fmt.Sprintf("/dev/stdin:%d: Error: Could not process rule: %s\n%s", lineNo, msg, line), Err: errFake}
}

// Apply implements Runner.
func (f *Fake) Apply(_ context.Context, script []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Applies++
	return f.apply(script)
}

// Batch implements Runner: the same transaction as the equivalent nft
// script, after checking that every op encodes for the kernel (a rule the
// encoder does not know is fine: ExecRunner sends such a batch to nft).
func (f *Fake) Batch(_ context.Context, family, table string, ops []Op) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Batches++
	var w nlmsg.Writer
	if err := encodeBatch(&w, family, table, ops); err != nil && !errors.Is(err, errNotEncodable) && !errors.Is(err, errBatchTooBig) {
		return &Error{Stderr: "Error: Could not process rule: " + msgInvalArg + "\n" + err.Error(), Err: errFake}
	}
	return f.apply(opsScript(family, table, ops))
}

// RuleCount implements Runner.
func (f *Fake) RuleCount(_ context.Context, family, table, chain string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.tables[family+" "+table]; t != nil && t.chains[chain] != nil {
		return len(t.chains[chain].Rules), nil
	}
	return 0, nil
}

func (f *Fake) apply(script []byte) error {
	f.LastScript = slices.Clone(script)
	staged := map[string]*FakeTable{}
	order := slices.Clone(f.order)
	deleted := map[string]bool{}
	get := func(key string) *FakeTable {
		if deleted[key] {
			return nil
		}
		if t, ok := staged[key]; ok {
			return t
		}
		if t, ok := f.tables[key]; ok {
			staged[key] = t.clone()
			return staged[key]
		}
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		w := strings.Fields(line)
		if len(w) < 4 {
			return &Error{Stderr: fmt.Sprintf("/dev/stdin:%d: Error: syntax error\n%s", lineNo, line), Err: errFake}
		}
		verb, obj := w[0], w[1]
		if obj == "table" {
			key := w[2] + " " + w[3]
			if w[2] != "ip" && w[2] != "ip6" {
				return fakeErr(lineNo, line, "unsupported family "+w[2])
			}
			switch verb {
			case "add":
				if get(key) == nil {
					delete(deleted, key)
					staged[key] = &FakeTable{Family: w[2], Name: w[3], sets: map[string]*fakeSet{}, chains: map[string]*FakeChain{}}
					order = append(order, key)
				}
			case "delete":
				if get(key) == nil {
					return fakeErr(lineNo, line, msgNoEnt)
				}
				deleted[key] = true
				delete(staged, key)
				order = slices.DeleteFunc(order, func(s string) bool { return s == key })
			case "flush":
				t := get(key)
				if t == nil {
					return fakeErr(lineNo, line, msgNoEnt)
				}
				for _, c := range t.chains {
					c.Rules = nil
				}
			default:
				return fakeErr(lineNo, line, "unsupported command")
			}
			continue
		}
		if len(w) < 5 {
			return &Error{Stderr: fmt.Sprintf("/dev/stdin:%d: Error: syntax error\n%s", lineNo, line), Err: errFake}
		}
		t := get(w[2] + " " + w[3])
		if t == nil {
			return fakeErr(lineNo, line, msgNoEnt)
		}
		if msg := t.apply(verb, obj, w[4], restAfter(line, 5)); msg != "" {
			return fakeErr(lineNo, line, msg)
		}
	}
	for key, t := range staged {
		if msg := t.validate(); msg != "" {
			return &Error{Stderr: "Error: Could not process rule: " + msg + " (table " + key + ")", Err: errFake}
		}
	}
	for key := range deleted {
		delete(f.tables, key)
	}
	for key, t := range staged {
		f.tables[key] = t
	}
	f.order = order
	return nil
}

// restAfter returns line without its first n whitespace-separated words,
// with runs of blanks collapsed (nft prints single spaces).
func restAfter(line string, n int) string {
	w := strings.Fields(line)
	if len(w) <= n {
		return ""
	}
	return strings.Join(w[n:], " ")
}

// apply runs one command on the table and returns the errno message on
// failure.
func (t *FakeTable) apply(verb, obj, name, rest string) string {
	switch obj + " " + verb {
	case "chain add":
		if len(name) > 255 {
			return "Numerical result out of range"
		}
		c, ok := t.chains[name]
		if !ok {
			c = &FakeChain{Name: name}
			t.chains[name] = c
			t.chainOrder = append(t.chainOrder, name)
		}
		if rest != "" {
			return c.setBase(rest, ok)
		}
	case "chain flush":
		c, ok := t.chains[name]
		if !ok {
			return msgNoEnt
		}
		c.Rules = nil
	case "chain delete":
		if _, ok := t.chains[name]; !ok {
			return msgNoEnt
		}
		if t.chainReferenced(name) {
			return msgBusy
		}
		delete(t.chains, name)
		t.chainOrder = slices.DeleteFunc(t.chainOrder, func(s string) bool { return s == name })
	case "rule add":
		c, ok := t.chains[name]
		if !ok {
			return msgNoEnt
		}
		if rest == "" {
			return msgInvalArg
		}
		for _, target := range verdictTargets(rest) {
			if _, ok := t.chains[target]; !ok {
				return msgNoEnt
			}
		}
		for _, s := range setRefs(rest) {
			set, ok := t.sets[s]
			if !ok {
				return msgNoEnt
			}
			if (strings.Contains(rest, "vmap @"+s) || strings.Contains(rest, " map @"+s)) && !set.isMap {
				return msgInvalArg
			}
		}
		c.Rules = append(c.Rules, rest)
	case "set add", "map add":
		s, msg := parseSetDecl(name, obj == "map", rest)
		if msg != "" {
			return msg
		}
		if old, ok := t.sets[name]; ok {
			if old.isMap != s.isMap || old.typ != s.typ || old.typeof != s.typeof || old.flags != s.flags || old.timeout != s.timeout || old.size != s.size {
				return msgExist
			}
			return ""
		}
		t.sets[name] = s
		t.setOrder = append(t.setOrder, name)
	case "set flush", "map flush":
		s, ok := t.sets[name]
		if !ok || s.isMap != (obj == "map") {
			return msgNoEnt
		}
		s.elems = map[string]string{}
	case "set delete", "map delete":
		s, ok := t.sets[name]
		if !ok || s.isMap != (obj == "map") {
			return msgNoEnt
		}
		if t.setReferenced(name) {
			return msgBusy
		}
		delete(t.sets, name)
		t.setOrder = slices.DeleteFunc(t.setOrder, func(n string) bool { return n == name })
	case "element add", "element delete":
		s, ok := t.sets[name]
		if !ok {
			return msgNoEnt
		}
		items, msg := parseElements(rest)
		if msg != "" {
			return msg
		}
		for _, it := range items {
			key, value, hasValue := strings.Cut(it, " : ")
			key, value = strings.TrimSpace(key), strings.TrimSpace(value)
			if msg := s.checkKey(key); msg != "" {
				return msg
			}
			if verb == "delete" {
				if _, ok := s.elems[key]; !ok {
					return msgNoEnt
				}
				delete(s.elems, key)
				continue
			}
			if s.isMap != hasValue {
				return msgInvalArg
			}
			if s.isMap {
				if msg := s.checkValue(value); msg != "" {
					return msg
				}
			}
			for _, target := range verdictTargets(value) {
				if _, ok := t.chains[target]; !ok {
					return msgNoEnt
				}
			}
			if old, ok := s.elems[key]; ok && old != value {
				return msgExist
			}
			s.elems[key] = value
		}
	default:
		return "unsupported command " + verb + " " + obj
	}
	return ""
}

func (c *FakeChain) setBase(decl string, existed bool) string {
	body := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(decl, "{"), "}"))
	var typ, hook, prio, policy string
	for _, part := range strings.Split(body, ";") {
		w := strings.Fields(part)
		switch {
		case len(w) == 0:
		case w[0] == "type" && len(w) >= 5 && w[2] == "hook" && w[4] == "priority":
			typ, hook, prio = w[1], w[3], strings.Join(w[5:], " ")
		case w[0] == "policy" && len(w) == 2:
			policy = w[1]
		default:
			return msgInvalArg
		}
	}
	if typ == "" || prio == "" {
		return msgInvalArg
	}
	switch hook {
	case "prerouting", "input", "forward", "output", "postrouting":
	default:
		return msgNotSupp
	}
	if typ == "nat" && prio == "dstnat" && hook != "prerouting" {
		return msgInvalArg // nft: "invalid priority expression value in this context"
	}
	if policy == "" {
		policy = "accept"
	}
	if existed && (c.Type != typ || c.Hook != hook || c.Priority != prio) {
		return msgExist
	}
	c.Type, c.Hook, c.Priority, c.Policy = typ, hook, prio, policy
	return ""
}

func parseSetDecl(name string, isMap bool, decl string) (*fakeSet, string) {
	s := &fakeSet{name: name, isMap: isMap, elems: map[string]string{}}
	body := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(decl, "{"), "}"))
	for _, part := range strings.Split(body, ";") {
		part = strings.TrimSpace(part)
		k, v, _ := strings.Cut(part, " ")
		switch k {
		case "":
		case "type":
			s.typ = v
		case "typeof":
			s.typ, s.typeof = v, true
		case "size":
			s.size = v
		case "flags":
			s.flags = v
		case "timeout":
			s.timeout = v
		default:
			return nil, msgInvalArg
		}
	}
	if s.typ == "" || strings.Contains(s.typ, " : ") != isMap {
		return nil, msgInvalArg
	}
	return s, ""
}

// fieldTypes returns the type names of the key (or value) fields.
func (s *fakeSet) fieldTypes(value bool) []string {
	key, val, _ := strings.Cut(s.typ, " : ")
	typ := key
	if value {
		typ = val
	}
	types := strings.Split(typ, " . ")
	for i, t := range types {
		types[i] = strings.TrimSpace(t)
		if s.typeof {
			types[i] = typeofType(types[i])
		}
	}
	return types
}

// typeofType maps a typeof expression to the data type nft derives.
func typeofType(expr string) string {
	w := strings.Fields(expr)
	switch {
	case len(w) >= 1 && w[0] == "numgen":
		return "integer"
	case len(w) == 2 && w[0] == "ip" && (w[1] == "daddr" || w[1] == "saddr"):
		return "ipv4_addr"
	case len(w) == 2 && w[0] == "ip6" && (w[1] == "daddr" || w[1] == "saddr"):
		return "ipv6_addr"
	case len(w) == 2 && (w[1] == "dport" || w[1] == "sport"):
		return "inet_service"
	}
	return "unknown " + expr
}

// checkKey checks an element key against the set's key type.
func (s *fakeSet) checkKey(key string) string { return checkFields(key, s.fieldTypes(false)) }

// checkValue checks a data map's value against its type; verdicts are
// checked by the caller.
func (s *fakeSet) checkValue(value string) string {
	types := s.fieldTypes(true)
	if len(types) == 1 && types[0] == "verdict" {
		return ""
	}
	return checkFields(value, types)
}

func checkFields(s string, types []string) string {
	parts := strings.Split(s, " . ")
	if len(types) != len(parts) {
		return msgInvalArg
	}
	for i, ty := range types {
		p := strings.TrimSpace(parts[i])
		switch ty {
		case "ipv4_addr":
			a, err := netip.ParseAddr(p)
			if err != nil || !a.Is4() || a.String() != p {
				return msgInvalArg
			}
		case "ipv6_addr":
			a, err := netip.ParseAddr(p)
			if err != nil || !a.Is6() || a.String() != p {
				return msgInvalArg
			}
		case "inet_proto":
			if p != "tcp" && p != "udp" && p != "sctp" {
				return msgInvalArg
			}
		case "inet_service":
			n, err := strconv.Atoi(p)
			if err != nil || n < 0 || n > 65535 {
				return msgInvalArg
			}
		case "integer":
			if _, err := strconv.ParseUint(p, 10, 32); err != nil {
				return msgInvalArg
			}
		default:
			return msgInvalArg
		}
	}
	return ""
}

// parseElements splits "{ a : b, c : d }".
func parseElements(s string) ([]string, string) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return nil, msgInvalArg
	}
	var out []string
	for _, it := range strings.Split(s[1:len(s)-1], ",") {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, strings.Join(strings.Fields(it), " "))
		}
	}
	if len(out) == 0 {
		return nil, msgInvalArg
	}
	return out, ""
}

func cleanToken(s string) string { return strings.Trim(s, "{},") }

// verdictTargets returns the chains a rule or verdict jumps or goes to.
func verdictTargets(s string) []string {
	w := strings.Fields(s)
	var out []string
	for i := 0; i+1 < len(w); i++ {
		if w[i] == "jump" || w[i] == "goto" {
			out = append(out, cleanToken(w[i+1]))
		}
	}
	return out
}

// setRefs returns the sets a rule names with @.
func setRefs(s string) []string {
	var out []string
	for _, tok := range strings.Fields(s) {
		if tok = cleanToken(tok); strings.HasPrefix(tok, "@") {
			out = append(out, tok[1:])
		}
	}
	return out
}

func (t *FakeTable) chainReferenced(name string) bool {
	for _, c := range t.chains {
		for _, r := range c.Rules {
			if slices.Contains(verdictTargets(r), name) {
				return true
			}
		}
	}
	for _, s := range t.sets {
		if !s.isMap {
			continue
		}
		for _, v := range s.elems {
			if slices.Contains(verdictTargets(v), name) {
				return true
			}
		}
	}
	return false
}

func (t *FakeTable) setReferenced(name string) bool {
	for _, c := range t.chains {
		for _, r := range c.Rules {
			if slices.Contains(setRefs(r), name) {
				return true
			}
		}
	}
	return false
}

// jumpStackSize is the kernel's NFT_JUMP_STACK_SIZE.
const jumpStackSize = 16

// validate walks every base chain like the kernel does at commit: loops (or
// nesting deeper than the jump stack) are EMLINK, statements reachable from
// a hook they are not valid in are EOPNOTSUPP.
func (t *FakeTable) validate() string {
	for _, name := range t.chainOrder {
		base := t.chains[name]
		if base.Hook == "" {
			continue
		}
		if msg := t.walk(base, base, 0); msg != "" {
			return msg
		}
	}
	return ""
}

func (t *FakeTable) walk(base, c *FakeChain, depth int) string {
	if depth >= jumpStackSize {
		return msgTooMany
	}
	for _, r := range c.Rules {
		if msg := stmtAllowed(base, r); msg != "" {
			return msg
		}
		targets := verdictTargets(r)
		for _, s := range setRefs(r) {
			if set := t.sets[s]; set != nil && set.isMap && strings.Contains(r, "vmap @"+s) {
				for _, v := range set.elems {
					targets = append(targets, verdictTargets(v)...)
				}
			}
		}
		slices.Sort(targets)
		for _, tg := range slices.Compact(targets) {
			if next := t.chains[tg]; next != nil {
				if msg := t.walk(base, next, depth+1); msg != "" {
					return msg
				}
			}
		}
	}
	return ""
}

func stmtAllowed(base *FakeChain, rule string) string {
	w := strings.Fields(rule)
	for i, tok := range w {
		if i > 0 && w[i-1] == "status" {
			continue // "ct status dnat" is a match, not the statement
		}
		switch tok {
		case "dnat":
			if base.Type != "nat" || (base.Hook != "prerouting" && base.Hook != "output") {
				return msgNotSupp
			}
		case "masquerade":
			if base.Type != "nat" || base.Hook != "postrouting" {
				return msgNotSupp
			}
		case "reject":
			if base.Hook != "input" && base.Hook != "forward" && base.Hook != "output" {
				return msgNotSupp
			}
		}
	}
	return ""
}

// List implements Runner for the listings the Proxier and tests use:
// "list table F T", "list chains F", "-t list sets F" and "-t list maps F".
func (f *Fake) List(_ context.Context, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := slices.DeleteFunc(slices.Clone(args), func(s string) bool { return s == "-t" })
	switch {
	case len(a) == 4 && a[0] == "list" && a[1] == "table":
		t := f.tables[a[2]+" "+a[3]]
		if t == nil {
			return nil, &Error{Stderr: "Error: No such file or directory\nlist table " + a[2] + " " + a[3], Err: errFake}
		}
		return []byte(t.dump()), nil
	case len(a) == 3 && a[0] == "list" && (a[1] == "chains" || a[1] == "sets" || a[1] == "maps"):
		var sb strings.Builder
		for _, key := range f.order {
			t := f.tables[key]
			if t.Family != a[2] {
				continue
			}
			fmt.Fprintf(&sb, "table %s %s {\n", t.Family, t.Name)
			if a[1] == "chains" {
				for _, c := range t.chainOrder {
					fmt.Fprintf(&sb, "\tchain %s {\n\t}\n", c)
				}
			} else {
				// Like nft: "list sets" shows sets only, "list maps" maps.
				for _, n := range t.setOrder {
					if t.sets[n].isMap == (a[1] == "maps") {
						fmt.Fprintf(&sb, "\t%s %s {\n\t}\n", strings.TrimSuffix(a[1], "s"), n)
					}
				}
			}
			sb.WriteString("}\n")
		}
		return []byte(sb.String()), nil
	}
	return nil, fmt.Errorf("fake nft: unsupported list %v", args)
}

// Dump lists every table in `nft list table` syntax (elements sorted).
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sb strings.Builder
	for _, key := range f.order {
		sb.WriteString(f.tables[key].dump())
	}
	return sb.String()
}

// Table returns a table (nil if absent) for tracers and assertions.
func (f *Fake) Table(family, name string) *FakeTable {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tables[family+" "+name]
}

// Chain returns a chain (nil if absent).
func (t *FakeTable) Chain(name string) *FakeChain { return t.chains[name] }

// Chains returns the chain names in creation order.
func (t *FakeTable) Chains() []string { return slices.Clone(t.chainOrder) }

// Sets returns the set and map names in creation order.
func (t *FakeTable) Sets() []string { return slices.Clone(t.setOrder) }

// Elements returns a set's or map's elements (key → value); nil if the set
// does not exist.
func (t *FakeTable) Elements(set string) map[string]string {
	s := t.sets[set]
	if s == nil {
		return nil
	}
	return s.elems
}

func (t *FakeTable) dump() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "table %s %s {\n", t.Family, t.Name)
	first := true
	sep := func() {
		if !first {
			sb.WriteString("\n")
		}
		first = false
	}
	for _, n := range t.setOrder {
		s := t.sets[n]
		sep()
		kw := "set"
		if s.isMap {
			kw = "map"
		}
		tkw := "type"
		if s.typeof {
			tkw = "typeof"
		}
		fmt.Fprintf(&sb, "\t%s %s {\n\t\t%s %s\n", kw, n, tkw, s.typ)
		if s.size != "" {
			fmt.Fprintf(&sb, "\t\tsize %s\n", s.size)
		}
		if s.flags != "" {
			fmt.Fprintf(&sb, "\t\tflags %s\n", s.flags)
		}
		if s.timeout != "" {
			fmt.Fprintf(&sb, "\t\ttimeout %s\n", s.timeout)
		}
		if len(s.elems) > 0 {
			items := make([]string, 0, len(s.elems))
			for k, v := range s.elems {
				if s.isMap {
					k += " : " + v
				}
				items = append(items, k)
			}
			slices.Sort(items)
			fmt.Fprintf(&sb, "\t\telements = { %s }\n", strings.Join(items, ",\n\t\t\t     "))
		}
		sb.WriteString("\t}\n")
	}
	for _, n := range t.chainOrder {
		c := t.chains[n]
		sep()
		fmt.Fprintf(&sb, "\tchain %s {\n", n)
		if c.Hook != "" {
			fmt.Fprintf(&sb, "\t\ttype %s hook %s priority %s; policy %s;\n", c.Type, c.Hook, c.Priority, c.Policy)
		}
		for _, r := range c.Rules {
			fmt.Fprintf(&sb, "\t\t%s\n", r)
		}
		sb.WriteString("\t}\n")
	}
	sb.WriteString("}\n")
	return sb.String()
}
