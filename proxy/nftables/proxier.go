package nftables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/nfwatch"
)

// Proxier is the nftables proxy.DataPlane for one IP family.
type Proxier struct {
	family proxy.Family
	runner Runner
	log    *slog.Logger
	w      writer

	// What the last successful sync programmed; valid while synced.
	synced   bool
	services map[proxy.ServicePortName]*objects
	// owners says which service holds each map element, so two services
	// claiming the same external IP:port do not make the transaction fail
	// with EEXIST: the first (in name order) wins.
	owners   map[string]proxy.ServicePortName
	shared   refs // shared elements (hairpin) by id
	setUsers refs // shared sets (endpoint map shards) by name
	blocks   *blocks
	rules    int // rules and elements of all services (metrics)
	fixed    int
}

// New returns a Proxier programming table TableName of family through
// runner (an ExecRunner on a node).
func New(family proxy.Family, runner Runner, log *slog.Logger) *Proxier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Proxier{family: family, runner: runner, log: log, w: writer{family: family},
		services: map[proxy.ServicePortName]*objects{}, owners: map[string]proxy.ServicePortName{}, shared: refs{}, setUsers: refs{}, blocks: newBlocks()}
}

// Name implements proxy.DataPlane.
func (p *Proxier) Name() string { return "nftables" }

// Transaction sections, in the order the kernel needs them: objects exist
// before anything references them, references go before what they point
// to is deleted.
const (
	secDecl     = iota // add table / set / map / chain
	secFlush           // flush table / chains / maps
	secDelElem         // delete element
	secRules           // add rule
	secAddElem         // add element
	secDelChain        // delete chain
	secDelSet          // delete set
	numSections
)

// maxElemsPerCommand keeps command lines reasonably short.
const maxElemsPerCommand = 1000

// tx accumulates one transaction. Commands that only the CLI path carries
// are written as text at once; flushed chains, added rules and elements are
// kept as Ops, so the transaction can also go to the runner's batch path
// (see batchOps), and are rendered as text only for the CLI.
type tx struct {
	family  string // "ip"
	prefix  string // "ip nodenet-proxy"
	sec     [numSections]bytes.Buffer
	flushed []Op      // existing chains emptied
	rules   []Op      // rules added, in order
	adds    []element // elements to add, in order
	dels    []element // elements to delete, in order
	written int
}

func newTx(w writer) *tx {
	return &tx{family: w.nftFamily(), prefix: w.nftFamily() + " " + TableName}
}

// line writes a command only the CLI path carries.
func (t *tx) line(sec int, parts ...string) {
	b := &t.sec[sec]
	for i, s := range parts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	b.WriteByte('\n')
}

func setKeyword(isMap bool) string {
	if isMap {
		return "map"
	}
	return "set"
}

func (t *tx) declSet(s setDef) {
	t.line(secDecl, "add", setKeyword(s.isMap), t.prefix, s.name, s.decl)
}

func (t *tx) declChain(c chainDef) {
	if c.base != "" {
		t.line(secDecl, "add chain", t.prefix, c.name, c.base)
		return
	}
	t.line(secDecl, "add chain", t.prefix, c.name)
}

func (t *tx) addRules(c chainDef) {
	for _, r := range c.rules {
		t.rules = append(t.rules, Op{Kind: OpAddRule, Chain: c.name, Rule: r})
	}
	t.written += len(c.rules)
}

// flushChain empties an existing chain.
func (t *tx) flushChain(name string) {
	t.flushed = append(t.flushed, Op{Kind: OpFlushChain, Chain: name})
}

func (t *tx) addElem(e element) {
	t.adds = append(t.adds, e)
	t.written++
}

func (t *tx) delElem(e element) { t.dels = append(t.dels, e) }

// cliOnly reports whether the transaction has a command only the CLI path
// carries (declarations, deletions, table and set flushes).
func (t *tx) cliOnly() bool {
	for i := range t.sec {
		if t.sec[i].Len() > 0 {
			return true
		}
	}
	return false
}

func (t *tx) empty() bool {
	return !t.cliOnly() && len(t.flushed)+len(t.rules)+len(t.adds)+len(t.dels) == 0
}

// batchOps returns the transaction as Ops if the runner may send it
// without the CLI: only rewritten rules of existing chains and elements of
// data sets (an endpoint replaced, or the endpoint count changed). The
// order is the sections': flushes, element deletions, rules, element
// additions.
func (t *tx) batchOps(w writer) ([]Op, bool) {
	if t.cliOnly() {
		return nil, false
	}
	ops := slices.Concat(t.flushed, make([]Op, 0, len(t.dels)+len(t.rules)+len(t.adds)))
	elems := func(kind OpKind, list []element) bool {
		for _, e := range list {
			l, ok := w.layout(e.set)
			if !ok {
				return false // a verdict map: the CLI path
			}
			ops = append(ops, Op{Kind: kind, Set: e.set, Layout: l, Key: e.key, Value: e.value})
		}
		return true
	}
	if !elems(OpDeleteElement, t.dels) {
		return nil, false
	}
	ops = append(ops, t.rules...)
	if !elems(OpAddElement, t.adds) {
		return nil, false
	}
	return ops, true
}

// elemLines writes "verb element" commands, grouped by set (sets in name
// order, elements in the order given).
func (t *tx) elemLines(sec int, verb string, elems []element) {
	bySet := map[string][]string{}
	for _, e := range elems {
		item := e.key
		if verb == "add" && e.value != "" {
			item += " : " + e.value
		}
		bySet[e.set] = append(bySet[e.set], item)
	}
	for _, s := range slices.Sorted(maps.Keys(bySet)) {
		items := bySet[s]
		for len(items) > 0 {
			n := min(len(items), maxElemsPerCommand)
			t.line(sec, verb, "element", t.prefix, s, "{", strings.Join(items[:n], ", "), "}")
			items = items[n:]
		}
	}
}

// bytes renders the whole transaction as an nft script.
func (t *tx) bytes() []byte {
	for _, op := range slices.Concat(t.flushed, t.rules) {
		sec := secRules
		if op.Kind == OpFlushChain {
			sec = secFlush
		}
		t.line(sec, op.script(t.prefix))
	}
	t.elemLines(secDelElem, "delete", t.dels)
	t.elemLines(secAddElem, "add", t.adds)
	t.flushed, t.rules, t.adds, t.dels = nil, nil, nil, nil
	var out bytes.Buffer
	for i := range t.sec {
		out.Write(t.sec[i].Bytes())
	}
	return out.Bytes()
}

// apply commits t: through the runner's batch path when it can (see
// batchOps), everything else as one nft script.
func (p *Proxier) apply(ctx context.Context, t *tx) error {
	if ops, ok := t.batchOps(p.w); ok {
		return p.runner.Batch(ctx, t.family, TableName, ops)
	}
	return p.runner.Apply(ctx, t.bytes())
}

// Sync implements proxy.DataPlane.
func (p *Proxier) Sync(ctx context.Context, snap *proxy.Snapshot, changed proxy.ChangeSet) (proxy.SyncResult, error) {
	if snap.Family != p.family {
		return proxy.SyncResult{}, fmt.Errorf("sync nftables %s: snapshot is %s", p.family, snap.Family)
	}
	if changed.Full || !p.synced {
		return p.fullSync(ctx, snap)
	}
	return p.partialSync(ctx, snap, changed)
}

func (p *Proxier) total() int { return p.fixed + p.rules }

// claim keeps the elements of o that no other service holds and records
// them as owned by n. Shared elements belong to everyone who wants them.
func claim(owners map[string]proxy.ServicePortName, n proxy.ServicePortName, o *objects, log *slog.Logger) {
	kept := o.elements[:0]
	for _, e := range o.elements {
		if e.shared {
			kept = append(kept, e)
			continue
		}
		if other, ok := owners[e.id()]; ok && other != n {
			log.Warn("nftables: element already used by another service; skipped", "service", n.String(), "other", other.String(), "map", e.set, "key", e.key)
			continue
		}
		owners[e.id()] = n
		kept = append(kept, e)
	}
	o.elements = kept
}

// fullSync rewrites the whole table in one transaction: declare everything
// (add is a no-op for what exists), flush rules and map elements, write the
// desired rules and elements, delete what is no longer wanted. The table
// itself stays, so established connections (conntrack) and affinity sets
// survive a restart.
func (p *Proxier) fullSync(ctx context.Context, snap *proxy.Snapshot) (proxy.SyncResult, error) {
	p.synced = false
	exChains, exSets, err := p.existing(ctx)
	if err != nil {
		return proxy.SyncResult{}, err
	}
	t := newTx(p.w)
	t.line(secDecl, "add table", t.prefix)
	wantChains, wantSets := map[string]bool{}, map[string]bool{}
	existing := map[string]bool{}
	for _, s := range exSets {
		existing[s.name] = true
	}
	var recreate bytes.Buffer
	wantSet := func(s setDef) {
		if wantSets[s.name] {
			return // shared by several services
		}
		wantSets[s.name] = true
		switch {
		case s.recreate && existing[s.name]:
			// After "flush table" nothing refers to it any more.
			fmt.Fprintf(&recreate, "delete %s %s %s\nadd %s %s %s %s\n", setKeyword(s.isMap), t.prefix, s.name, setKeyword(s.isMap), t.prefix, s.name, s.decl)
		case s.dynamic:
			t.declSet(s)
		default:
			t.declSet(s)
			t.line(secFlush, "flush", setKeyword(s.isMap), t.prefix, s.name)
		}
	}
	for _, s := range p.w.fixedSets() {
		wantSet(s)
	}
	fixedChains := p.w.fixedChains(snap)
	fixedN := 0
	for _, c := range fixedChains {
		t.declChain(c)
		wantChains[c.name] = true
		t.addRules(c)
		fixedN += len(c.rules)
	}
	for _, e := range p.w.fixedElements(snap) {
		t.addElem(e)
		fixedN++
	}

	next := make(map[proxy.ServicePortName]*objects, len(snap.Services))
	owners := map[string]proxy.ServicePortName{}
	shared, setUsers := refs{}, refs{}
	alloc := newBlocks()
	for _, n := range snap.SortedNames() {
		o := p.w.service(snap, snap.Services[n], alloc)
		claim(owners, n, o, p.log)
		for _, s := range o.sets {
			wantSet(s)
			if s.shared {
				setUsers[s.name]++
			}
		}
		for _, c := range o.chains {
			t.declChain(c)
			wantChains[c.name] = true
			t.addRules(c)
		}
		for _, e := range o.elements {
			if e.shared {
				if shared[e.id()]++; shared[e.id()] > 1 {
					continue
				}
			}
			t.addElem(e)
		}
		next[n] = o
	}
	for _, c := range exChains {
		if !wantChains[c] {
			t.line(secDelChain, "delete chain", t.prefix, c)
		}
	}
	for _, s := range exSets {
		if !wantSets[s.name] {
			t.line(secDelSet, "delete", setKeyword(s.isMap), t.prefix, s.name)
		}
	}
	// flush table goes before the re-created maps and the set flushes.
	var flush bytes.Buffer
	flush.WriteString("flush table " + t.prefix + "\n")
	flush.Write(recreate.Bytes())
	flush.Write(t.sec[secFlush].Bytes())
	t.sec[secFlush] = flush
	written := t.written
	if err := p.runner.Apply(ctx, t.bytes()); err != nil {
		return proxy.SyncResult{}, fmt.Errorf("full sync of nftables %s: %w", p.family, err)
	}
	p.services, p.owners, p.shared, p.setUsers, p.blocks, p.fixed, p.synced = next, owners, shared, setUsers, alloc, fixedN, true
	p.rules = 0
	for _, o := range next {
		p.rules += o.ruleCount()
	}
	return proxy.SyncResult{Written: written, Total: p.total()}, nil
}

// partialSync rewrites only the changed services: new chains and sets are
// added, chains whose rules changed are flushed and refilled, elements are
// deleted/added by difference, and chains/sets no longer wanted are flushed
// and deleted after everything pointing at them is gone — one transaction.
func (p *Proxier) partialSync(ctx context.Context, snap *proxy.Snapshot, changed proxy.ChangeSet) (proxy.SyncResult, error) {
	sorted := proxy.SortedPorts(changed, p.services, snap)
	// The bookkeeping below is updated in place: if the transaction fails,
	// the next sync is a full one, which rebuilds all of it from the
	// snapshot. (Copying it made a one-endpoint change cost 5 ms at 10,000
	// services.)
	for _, n := range sorted {
		if old := p.services[n]; old != nil {
			for _, e := range old.elements {
				if !e.shared && p.owners[e.id()] == n {
					delete(p.owners, e.id())
				}
			}
		}
	}
	t := newTx(p.w)
	next := map[proxy.ServicePortName]*objects{}
	keepChain, keepSet := map[string]bool{}, map[string]bool{}
	var dropChains []string
	dropSets := map[string]setDef{}
	// Shared elements and sets: how many services more (or fewer) want
	// each, applied to the counts after the loop.
	elemDelta, setDelta := map[string]int{}, map[string]int{}
	sharedElems, sharedSets := map[string]element{}, map[string]setDef{}
	for _, n := range sorted {
		old := p.services[n]
		if old == nil {
			old = &objects{}
		}
		nw := &objects{}
		if sp := snap.Services[n]; sp != nil {
			nw = p.w.service(snap, sp, p.blocks)
			claim(p.owners, n, nw, p.log)
		}
		for _, c := range old.blocks {
			if !slices.Contains(nw.blocks, c) {
				p.blocks.release(c)
			}
		}
		next[n] = nw

		oldSets := map[string]bool{}
		for _, s := range old.sets {
			oldSets[s.name] = true
			if s.shared {
				setDelta[s.name]--
				sharedSets[s.name] = s
			} else {
				dropSets[s.name] = s
			}
		}
		for _, s := range nw.sets {
			keepSet[s.name] = true
			if s.shared {
				setDelta[s.name]++
				sharedSets[s.name] = s
			} else if !oldSets[s.name] {
				t.declSet(s)
			}
		}

		oldChains := map[string]chainDef{}
		for _, c := range old.chains {
			oldChains[c.name] = c
			dropChains = append(dropChains, c.name)
		}
		for _, c := range nw.chains {
			keepChain[c.name] = true
			oc, ok := oldChains[c.name]
			switch {
			case !ok:
				t.declChain(c)
				t.addRules(c)
			case !slices.Equal(oc.rules, c.rules):
				t.flushChain(c.name)
				t.addRules(c)
			}
		}

		oldElems := map[string]element{}
		for _, e := range old.elements {
			oldElems[e.id()] = e
		}
		newElems := map[string]element{}
		for _, e := range nw.elements {
			newElems[e.id()] = e
		}
		for _, e := range old.elements {
			if e.shared {
				elemDelta[e.id()]--
				sharedElems[e.id()] = e
			} else if ne, ok := newElems[e.id()]; !ok || ne.value != e.value {
				t.delElem(e)
			}
		}
		for _, e := range nw.elements {
			if e.shared {
				elemDelta[e.id()]++
				sharedElems[e.id()] = e
			} else if oe, ok := oldElems[e.id()]; !ok || oe.value != e.value {
				t.addElem(e)
			}
		}
	}
	p.shared.change(elemDelta,
		func(id string) { t.addElem(sharedElems[id]) },
		func(id string) { t.delElem(sharedElems[id]) })
	p.setUsers.change(setDelta,
		func(name string) { t.declSet(sharedSets[name]) },
		func(name string) { dropSets[name] = sharedSets[name] })
	slices.Sort(dropChains)
	for _, c := range slices.Compact(dropChains) {
		if !keepChain[c] {
			t.line(secFlush, "flush chain", t.prefix, c)
			t.line(secDelChain, "delete chain", t.prefix, c)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(dropSets)) {
		if !keepSet[name] {
			t.line(secDelSet, "delete", setKeyword(dropSets[name].isMap), t.prefix, name)
		}
	}
	written := t.written
	if !t.empty() {
		if err := p.apply(ctx, t); err != nil {
			p.synced = false
			return proxy.SyncResult{}, fmt.Errorf("partial sync of nftables %s: %w", p.family, err)
		}
	}
	for n, o := range next {
		if old := p.services[n]; old != nil {
			p.rules -= old.ruleCount()
		}
		if snap.Services[n] == nil {
			delete(p.services, n)
		} else {
			p.services[n] = o
			p.rules += o.ruleCount()
		}
	}
	return proxy.SyncResult{Written: written, Total: p.total()}, nil
}

// refs counts the services that want each shared element or set: it is in
// the kernel while its count is above zero.
type refs map[string]int

// change adds the deltas to the counts and calls appear or vanish, in name
// order, for what crossed zero.
func (r refs) change(delta map[string]int, appear, vanish func(name string)) {
	for _, name := range slices.Sorted(maps.Keys(delta)) {
		before := r[name]
		after := before + delta[name]
		switch {
		case before > 0 && after <= 0:
			vanish(name)
		case before <= 0 && after > 0:
			appear(name)
		}
		if after > 0 {
			r[name] = after
		} else {
			delete(r, name)
		}
	}
}

// Intact implements proxy.IntegrityChecker: the services chain, which
// every sync fills, must still have its rules. `nft flush ruleset`, a
// deleted table or a flushed table all empty it.
func (p *Proxier) Intact(ctx context.Context) (bool, error) {
	if !p.synced {
		return true, nil // a full sync is due anyway
	}
	n, err := p.runner.RuleCount(ctx, p.w.nftFamily(), TableName, chainServices)
	if err != nil {
		return false, fmt.Errorf("check nftables %s: %w", p.family, err)
	}
	return n > 0, nil
}

// existing lists the chains and sets (names only) of our table, so a full
// sync can delete what it no longer wants, whatever process created it.
func (p *Proxier) existing(ctx context.Context) ([]string, []setDef, error) {
	fam := p.w.nftFamily()
	out, err := p.runner.List(ctx, "list", "chains", fam)
	if err != nil {
		return nil, nil, fmt.Errorf("list nftables chains: %w", err)
	}
	chains := objectNames(out, fam, "chain")
	// `list sets` leaves maps out; they have their own listing.
	var sets []setDef
	for _, kind := range []string{"set", "map"} {
		out, err = p.runner.List(ctx, "-t", "list", kind+"s", fam)
		if err != nil {
			return nil, nil, fmt.Errorf("list nftables %ss: %w", kind, err)
		}
		for _, s := range objectNames(out, fam, kind) {
			sets = append(sets, setDef{name: s, isMap: kind == "map"})
		}
	}
	return chains, sets, nil
}

// objectNames picks "kind NAME {" lines inside "table FAM nodenet-proxy {"
// of an nft listing.
func objectNames(listing []byte, fam, kind string) []string {
	var names []string
	in := false
	sc := bufio.NewScanner(bytes.NewReader(listing))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "table ") {
			in = l == "table "+fam+" "+TableName+" {"
			continue
		}
		if !in {
			continue
		}
		if rest, ok := strings.CutPrefix(l, kind+" "); ok && strings.HasSuffix(rest, " {") {
			names = append(names, strings.TrimSuffix(rest, " {"))
		}
	}
	return names
}

// Cleanup implements proxy.DataPlane: it deletes the table (everything this
// data plane ever programmed for the family, by any process).
func (p *Proxier) Cleanup(ctx context.Context) error {
	p.synced = false
	p.services = map[proxy.ServicePortName]*objects{}
	p.rules = 0
	p.owners = map[string]proxy.ServicePortName{}
	p.shared, p.setUsers = refs{}, refs{}
	p.blocks = newBlocks()
	err := p.runner.Apply(ctx, []byte("delete table "+p.w.nftFamily()+" "+TableName+"\n"))
	if err == nil || IsNotFound(err) || errors.Is(err, ErrNotFound) {
		return nil
	}
	return fmt.Errorf("cleanup nftables %s: %w", p.family, err)
}

// WatchChanges implements proxy.ChangeWatcher: every deletion in the
// proxy's table (a flushed chain, `nft flush ruleset`, a deleted table)
// in the namespace the runner programs. Only an ExecRunner reaches a
// kernel; other runners have nothing to watch.
func (p *Proxier) WatchChanges(ctx context.Context, changed func()) error {
	r, ok := p.runner.(*ExecRunner)
	if !ok {
		return fmt.Errorf("nftables runner %T: %w", p.runner, proxy.ErrNoChangeEvents)
	}
	return nfwatch.Watch(ctx, r.Netns, nfwatch.Tables(p.family, TableName), changed)
}
