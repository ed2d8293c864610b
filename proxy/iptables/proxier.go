package iptables

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"

	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/nfwatch"
)

// Proxier is the iptables proxy.DataPlane for one IP family.
type Proxier struct {
	family proxy.Family
	runner ipt.Runner
	log    *slog.Logger

	// What the last successful sync programmed; valid while synced.
	synced   bool
	services map[proxy.ServicePortName]*programmed
	total    int
	// servicesTail: the last full sync ended nat NODENET-SERVICES with
	// the jump to NODENET-NODEPORTS, which Intact then looks for.
	servicesTail bool
	// netns is where the runner's commands run, for WatchChanges.
	netns string
}

// programmed is what one service port has in the kernel.
type programmed struct {
	rules  *serviceRules
	chains map[string]uint64 // owned chain → hash of its rules
}

// New returns a Proxier programming through runner, which must be of the
// same family.
func New(family proxy.Family, runner ipt.Runner, log *slog.Logger) *Proxier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Proxier{family: family, runner: runner, log: log, services: map[proxy.ServicePortName]*programmed{}}
}

// SetNetns names the network namespace the runner's commands program (a
// name `ip netns` knows or a path; default "": the proxy's own), which is
// where WatchChanges listens. Call it before the proxy starts.
func (p *Proxier) SetNetns(netns string) { p.netns = netns }

// WatchChanges implements proxy.ChangeWatcher: with iptables-nft, every
// deletion in nf_tables' nat and filter tables of the family (where
// `iptables -F`, `-X` and a firewall reload remove the proxy's rules);
// iptables-legacy announces nothing.
func (p *Proxier) WatchChanges(ctx context.Context, changed func()) error {
	b, ok := p.runner.(interface{ Backend() ipt.Backend })
	if !ok || b.Backend() != ipt.NFT {
		return fmt.Errorf("iptables runner %T: %w", p.runner, proxy.ErrNoChangeEvents)
	}
	return nfwatch.Watch(ctx, p.netns, nfwatch.Tables(p.family, tableNAT, tableFilter), changed)
}

// Name implements proxy.DataPlane.
func (p *Proxier) Name() string { return "iptables" }

func chainHash(rules []string) uint64 {
	h := fnv.New64a()
	for _, r := range rules {
		h.Write([]byte(r))
		h.Write([]byte{'\n'})
	}
	return h.Sum64()
}

// Sync implements proxy.DataPlane.
func (p *Proxier) Sync(ctx context.Context, snap *proxy.Snapshot, changed proxy.ChangeSet) (proxy.SyncResult, error) {
	if snap.Family != p.family {
		return proxy.SyncResult{}, fmt.Errorf("sync iptables %s: snapshot is %s", p.family, snap.Family)
	}
	full := changed.Full || !p.synced
	var (
		b    *ipt.Batch
		next map[proxy.ServicePortName]*programmed
		err  error
	)
	if full {
		b, next, err = p.fullBatch(ctx, snap)
		if err != nil {
			p.synced = false
			return proxy.SyncResult{}, err
		}
		if b.Empty() {
			p.services, p.synced = next, true
			return proxy.SyncResult{Total: p.countTotal()}, nil
		}
	} else {
		b, next = p.partialBatch(snap, changed)
		if b.Empty() {
			return proxy.SyncResult{Total: p.total}, nil
		}
	}
	if err := p.runner.Restore(ctx, b.Bytes()); err != nil {
		p.synced = false
		return proxy.SyncResult{}, fmt.Errorf("restore %s rules: %w", p.family, err)
	}
	p.services = next
	p.synced = true
	return proxy.SyncResult{Written: b.Added(), Total: p.countTotal()}, nil
}

// countTotal is the number of rules this data plane owns (services' rules
// plus the fixed chains and hooks).
func (p *Proxier) countTotal() int {
	n := len(hooks) + 8
	for _, pr := range p.services {
		n += pr.rules.ruleCount()
	}
	p.total = n
	return n
}

// existing is what iptables-save shows: our chains with their rules, and
// the hook rules present in built-in chains.
type existing struct {
	chains map[string]map[string][]string // table → chain → rules
	hooks  map[string]bool                // "table/chain/rule"
}

func (p *Proxier) readExisting(ctx context.Context) (*existing, error) {
	ex := &existing{chains: map[string]map[string][]string{}, hooks: map[string]bool{}}
	for _, t := range []string{tableFilter, tableNAT} {
		table, err := ipt.ReadTable(ctx, p.runner, t)
		if err != nil {
			return nil, err
		}
		chains := map[string][]string{}
		ex.chains[t] = chains
		for chain, rules := range table {
			if Owns(chain) {
				chains[chain] = rules
				continue
			}
			for _, rule := range rules {
				if jumpsToOwned(rule) {
					ex.hooks[t+"/"+chain+"/"+rule] = true
				}
			}
		}
	}
	return ex, nil
}

// unordered chains hold rules of many services whose order does not
// matter (partial syncs insert and delete in them), except nat
// NODENET-SERVICES's NodePort jump, which stays last.
func unordered(table, chain string) bool {
	return chain == chainServices || chain == chainNodePorts || chain == chainFirewall
}

// sameRules reports whether a chain already holds want. Unordered chains
// compare as multisets (with nat NODENET-SERVICES's tail kept in place).
func sameRules(table, chain string, have, want []string) bool {
	if len(have) != len(want) {
		return false
	}
	if !unordered(table, chain) {
		return slices.Equal(have, want)
	}
	tail := 0
	if table == tableNAT && chain == chainServices {
		for tail < len(want) && strings.Contains(want[len(want)-1-tail], "-j "+chainNodePorts) {
			tail++
		}
		if !slices.Equal(have[len(have)-tail:], want[len(want)-tail:]) {
			return false
		}
	}
	count := make(map[string]int, len(want))
	for _, r := range want[:len(want)-tail] {
		count[r]++
	}
	for _, r := range have[:len(have)-tail] {
		if count[r] == 0 {
			return false
		}
		count[r]--
	}
	return true
}

// fullBatch converges the kernel on snap: every chain whose rules differ
// from what iptables-save shows is rewritten, stale NODENET-* chains are
// deleted, missing hooks are inserted. Chains that already match are left
// alone, so the first sync after a restart (and a periodic resync with
// nothing to repair) writes almost nothing.
func (p *Proxier) fullBatch(ctx context.Context, snap *proxy.Snapshot) (*ipt.Batch, map[proxy.ServicePortName]*programmed, error) {
	ex, err := p.readExisting(ctx)
	if err != nil {
		return nil, nil, err
	}
	b := ipt.NewBatch()
	w := &ruleWriter{family: p.family}
	declared := map[string]map[string]bool{tableNAT: {}, tableFilter: {}}
	write := func(table, chain string, rules []string) {
		declared[table][chain] = true
		if have, ok := ex.chains[table][chain]; ok && sameRules(table, chain, have, rules) {
			return
		}
		b.Declare(table, chain)
		for _, rule := range rules {
			b.Append(table, chain, rule)
		}
	}
	shared := map[string][]string{}
	next := make(map[proxy.ServicePortName]*programmed, len(snap.Services))
	for _, n := range snap.SortedNames() {
		r := w.serviceRules(snap, snap.Services[n])
		pr := &programmed{rules: r, chains: make(map[string]uint64, len(r.chains))}
		for _, c := range r.chains {
			write(tableNAT, c.name, c.rules)
			pr.chains[c.name] = chainHash(c.rules)
		}
		shared["nat/"+chainServices] = append(shared["nat/"+chainServices], r.natServices...)
		shared["nat/"+chainNodePorts] = append(shared["nat/"+chainNodePorts], r.natNodePort...)
		shared["filter/"+chainServices] = append(shared["filter/"+chainServices], r.filterSvc...)
		shared["filter/"+chainFirewall] = append(shared["filter/"+chainFirewall], r.filterFW...)
		next[n] = pr
	}
	fixed := w.fixedRules(snap)
	p.servicesTail = len(fixed["nat/"+chainServices]) > 0
	for _, fc := range fixedChains {
		key := fc.table + "/" + fc.chain
		write(fc.table, fc.chain, append(shared[key], fixed[key]...))
	}
	for _, h := range hooks {
		if !ex.hooks[h.table+"/"+h.chain+"/"+h.rule] {
			b.Insert(h.table, h.chain, h.rule)
		}
	}
	for _, t := range []string{tableFilter, tableNAT} {
		for _, c := range sortedKeys(ex.chains[t]) {
			if !declared[t][c] {
				b.DeleteChain(t, c)
			}
		}
	}
	return b, next, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// partialBatch rewrites only the changed services: their owned chains whose
// rules changed, and their own rules in the shared chains (-D old, -I/-A
// new; order among services in a shared chain does not matter, and nat
// NODENET-SERVICES gets -I so its NodePort jump stays last).
func (p *Proxier) partialBatch(snap *proxy.Snapshot, changed proxy.ChangeSet) (*ipt.Batch, map[proxy.ServicePortName]*programmed) {
	b := ipt.NewBatch()
	w := &ruleWriter{family: p.family}
	next := p.services // updated in place: on failure synced=false forces a full rebuild
	sorted := proxy.SortedPorts(changed, p.services, snap)

	var oldChains []string // chains to delete are collected across services
	keep := map[string]bool{}
	for _, n := range sorted {
		old := p.services[n]
		var nr *serviceRules
		var pr *programmed
		if sp := snap.Services[n]; sp != nil {
			nr = w.serviceRules(snap, sp)
			pr = &programmed{rules: nr, chains: make(map[string]uint64, len(nr.chains))}
			for _, c := range nr.chains {
				h := chainHash(c.rules)
				pr.chains[c.name] = h
				keep[c.name] = true
				if old != nil {
					if oh, ok := old.chains[c.name]; ok && oh == h {
						continue
					}
				}
				b.Declare(tableNAT, c.name)
				for _, rule := range c.rules {
					b.Append(tableNAT, c.name, rule)
				}
			}
		} else {
			nr = &serviceRules{}
		}
		var or *serviceRules
		if old != nil {
			or = old.rules
			for c := range old.chains {
				oldChains = append(oldChains, c)
			}
		} else {
			or = &serviceRules{}
		}
		diffShared(b, tableNAT, chainServices, b.Insert, or.natServices, nr.natServices)
		diffShared(b, tableNAT, chainNodePorts, b.Append, or.natNodePort, nr.natNodePort)
		diffShared(b, tableFilter, chainServices, b.Append, or.filterSvc, nr.filterSvc)
		diffShared(b, tableFilter, chainFirewall, b.Append, or.filterFW, nr.filterFW)
		if pr != nil {
			next[n] = pr
		} else {
			delete(next, n)
		}
	}
	slices.Sort(oldChains)
	for _, c := range slices.Compact(oldChains) {
		if !keep[c] {
			b.DeleteChain(tableNAT, c)
		}
	}
	return b, next
}

// diffShared emits deletions of rules only in old and additions (with add:
// the batch's Append or Insert) of rules only in new (multiset difference).
func diffShared(b *ipt.Batch, table, chain string, add func(table, chain, rule string), old, new []string) {
	if slices.Equal(old, new) {
		return
	}
	count := map[string]int{}
	for _, r := range new {
		count[r]++
	}
	for _, r := range old {
		if count[r] > 0 {
			count[r]--
			continue
		}
		b.Delete(table, chain, r)
	}
	for _, r := range new {
		if count[r] > 0 {
			count[r]--
			add(table, chain, r)
		}
	}
}

// Cleanup implements proxy.DataPlane: it removes the hooks and every
// NODENET-* chain from nat and filter.
// canaries are what Intact looks at: a hook from a built-in chain and a
// fixed chain that always has a rule, per table. A firewall reload that
// restores the tables without our rules, or an `iptables -F`/`-X`, removes
// them; like kube-proxy's canary chains, without an extra chain.
var canaries = []canary{
	{tableNAT, "PREROUTING", "-j " + chainServices},
	{tableNAT, chainMarkMasq, "MARK"},
	{tableFilter, "FORWARD", "-j " + chainForward},
}

type canary struct{ table, chain, rule string }

// servicesCanary is nat NODENET-SERVICES' last rule, the jump to the
// NodePorts: `iptables -t nat -F NODENET-SERVICES` leaves every other
// canary in place while every ClusterIP stops working (the chaos suite
// found a flushed chain unrepaired until the hourly resync).
var servicesCanary = canary{tableNAT, chainServices, "-j " + chainNodePorts}

// Intact implements proxy.IntegrityChecker.
func (p *Proxier) Intact(ctx context.Context) (bool, error) {
	if !p.synced {
		return true, nil // a full sync is due anyway
	}
	check := canaries
	if p.servicesTail {
		check = append(slices.Clip(check), servicesCanary)
	}
	for _, c := range check {
		rules, ok, err := p.runner.ListChain(ctx, c.table, c.chain)
		if err != nil {
			return false, fmt.Errorf("check iptables %s: %w", p.family, err)
		}
		if !ok || !slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, c.rule) }) {
			return false, nil
		}
	}
	return true, nil
}

func (p *Proxier) Cleanup(ctx context.Context) error {
	p.synced = false
	p.services = map[proxy.ServicePortName]*programmed{}
	ex, err := p.readExisting(ctx)
	if errors.Is(err, ipt.ErrNotInstalled) {
		return nil // a backend that is not installed holds nothing
	}
	if err != nil {
		return fmt.Errorf("cleanup iptables %s: %w", p.family, err)
	}
	b := ipt.NewBatch()
	for key := range ex.hooks {
		parts := strings.SplitN(key, "/", 3)
		b.Delete(parts[0], parts[1], parts[2])
	}
	for t, chains := range ex.chains {
		for _, c := range sortedKeys(chains) {
			b.DeleteChain(t, c)
		}
	}
	if b.Empty() {
		return nil
	}
	if err := p.runner.Restore(ctx, b.Bytes()); err != nil {
		return fmt.Errorf("cleanup iptables %s: %w", p.family, err)
	}
	return nil
}
