package flanneld

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nodenet/nodenet/internal/iptables"
)

// openIPTables returns the iptables runner of one family.
type openIPTables func(ctx context.Context, family iptables.Family) (iptables.Runner, error)

// detectIPTables opens runners in ns, choosing each family's backend the
// way the proxy and the CNI plugin do (internal/iptables.Detect), so all
// three program the backend that already holds the node's rules.
func detectIPTables(ns Netns, log *slog.Logger) openIPTables {
	exec := nsExec(ns)
	return func(ctx context.Context, family iptables.Family) (iptables.Runner, error) {
		r, err := iptables.Open(ctx, exec, family)
		if err != nil {
			return nil, err
		}
		log.Info("iptables backend", "family", family, "backend", r.Backend(), "netns", ns)
		return r, nil
	}
}

// fixedIPTables opens runners of one backend in ns, without detection:
// a cleanup visits both backends, because rules written through one are
// invisible to the other.
func fixedIPTables(ns Netns, backend iptables.Backend) openIPTables {
	exec := nsExec(ns)
	return func(_ context.Context, family iptables.Family) (iptables.Runner, error) {
		return iptables.New(exec, family, backend), nil
	}
}

// nsExec runs the iptables tools inside ns.
func nsExec(ns Netns) iptables.Exec {
	return func(ctx context.Context, stdin []byte, argv ...string) (stdout, stderr []byte, err error) {
		// Do forks from a thread inside ns, which puts the child there.
		nsErr := ns.Do(func() error {
			stdout, stderr, err = iptables.Direct(ctx, stdin, argv...)
			return nil
		})
		if nsErr != nil {
			return nil, nil, nsErr
		}
		return stdout, stderr, err
	}
}

// iptablesMasq keeps our chains in the nat and filter tables, as
// kube-proxy does: each change is one iptables-restore --noflush per
// family, in which declaring a chain flushes it, so the chain is rewritten
// in one atomic step, and the jump from POSTROUTING/FORWARD is added once
// and any duplicate removed.
type iptablesMasq struct {
	open     openIPTables
	runners  map[iptables.Family]iptables.Runner // opened on first use
	families []masqFamily
	// last is what the kernel showed right after our last write, per
	// family; a resync that sees the same writes nothing.
	last map[iptables.Family]string
}

func newIPTablesMasq(open openIPTables, families []masqFamily) *iptablesMasq {
	return &iptablesMasq{open: open, runners: map[iptables.Family]iptables.Runner{}, families: families, last: map[iptables.Family]string{}}
}

// runner opens a family's runner once: the backend is chosen at start, as
// the proxy does, not re-decided on every resync.
func (m *iptablesMasq) runner(ctx context.Context, f iptables.Family) (iptables.Runner, error) {
	if r, ok := m.runners[f]; ok {
		return r, nil
	}
	r, err := m.open(ctx, f)
	if err != nil {
		return nil, err
	}
	m.runners[f] = r
	return r, nil
}

// masqState is what of ours the kernel holds in one family.
type masqState struct {
	rules              string   // our chains' rules, "table rule" per line
	natJumps, fwdJumps []string // jumps from POSTROUTING and FORWARD to them
	natChain, fwdChain bool     // the chains exist
}

func readMasqState(ctx context.Context, r iptables.Runner) (masqState, error) {
	nat, err := iptables.ReadTable(ctx, r, "nat")
	if err != nil {
		return masqState{}, err
	}
	filter, err := iptables.ReadTable(ctx, r, "filter")
	if err != nil {
		return masqState{}, err
	}
	var st masqState
	var rules []string
	for _, r := range nat[chainMasq] {
		rules = append(rules, "nat "+r)
	}
	for _, r := range filter[chainFwd] {
		rules = append(rules, "filter "+r)
	}
	st.rules = strings.Join(rules, "\n")
	st.natJumps, st.fwdJumps = jumpsTo(nat["POSTROUTING"], chainMasq), jumpsTo(filter["FORWARD"], chainFwd)
	_, st.natChain = nat[chainMasq]
	_, st.fwdChain = filter[chainFwd]
	return st, nil
}

func jumpsTo(rules []string, chain string) []string {
	var out []string
	for _, r := range rules {
		if strings.HasSuffix(r, "-j "+chain) {
			out = append(out, r)
		}
	}
	return out
}

func (m *iptablesMasq) Sync(ctx context.Context) (bool, error) {
	changed := false
	for _, f := range m.families {
		fam := f.family()
		r, err := m.runner(ctx, fam)
		if err != nil {
			return changed, err
		}
		st, err := readMasqState(ctx, r)
		if err != nil {
			return changed, err
		}
		if len(st.natJumps) == 1 && len(st.fwdJumps) == 1 && st.rules == m.last[fam] && st.rules != "" {
			continue
		}
		nat, filter := iptablesRules(f)
		b := iptables.NewBatch()
		writeChain(b, hookMasq, nat, st.natJumps)
		writeChain(b, hookFwd, filter, st.fwdJumps)
		if err := r.Restore(ctx, b.Bytes()); err != nil {
			return changed, fmt.Errorf("install %s masquerade rules: %w", fam, err)
		}
		changed = true
		if st, err = readMasqState(ctx, r); err != nil {
			return changed, err
		}
		m.last[fam] = st.rules
	}
	return changed, nil
}

// ourHook is one of our chains and the jump to it from a built-in chain.
type ourHook struct {
	table, chain, hook, comment string
	// last appends a missing jump instead of inserting it first.
	last bool
}

var (
	hookMasq = ourHook{table: "nat", chain: chainMasq, hook: "POSTROUTING", comment: commentMasq}
	// The forward chain only ACCEPTs pod traffic, for hosts whose FORWARD
	// policy drops. Ahead of the proxy's jumps in FORWARD (which it puts
	// first) it would accept what they refuse: a pod's SYN to a Service
	// without endpoints left the node untranslated instead of being reset,
	// and its conntrack entry kept the client's 5-tuple untranslated after
	// the endpoints came (the chaos suite's bursts of ClusterIP timeouts),
	// and loadBalancerSourceRanges went unenforced for traffic to pods. So
	// it goes last, as upstream flannel appends its forward rules, and is
	// behind kube-proxy's or our proxy's jumps whichever daemon started
	// first.
	hookFwd = ourHook{table: "filter", chain: chainFwd, hook: "FORWARD", comment: commentFwd, last: true}
)

// writeChain rewrites h's chain (its declaration flushes it) with rules,
// adds the jump from h's hook if missing and deletes duplicate jumps.
func writeChain(b *iptables.Batch, h ourHook, rules, jumps []string) {
	b.Declare(h.table, h.chain)
	for _, r := range rules {
		b.Append(h.table, h.chain, r)
	}
	if len(jumps) == 0 {
		jump := fmt.Sprintf(`-m comment --comment "%s" -j %s`, h.comment, h.chain)
		if h.last {
			b.Append(h.table, h.hook, jump)
		} else {
			b.Insert(h.table, h.hook, jump)
		}
	}
	for _, j := range jumps[min(1, len(jumps)):] {
		b.Delete(h.table, h.hook, j)
	}
}

// Cleanup removes the jumps and our chains, in every family.
func (m *iptablesMasq) Cleanup(ctx context.Context) ([]string, error) {
	return cleanupFamilies(ctx, m.cleanupFamily)
}

// cleanupFamilies runs one family's cleanup in both families and says what
// they removed. A family whose tools are not installed holds nothing we
// could have written; the other family is cleaned even when one fails.
func cleanupFamilies(ctx context.Context, family func(context.Context, iptables.Family) ([]string, error)) ([]string, error) {
	var removed []string
	var errs []error
	for _, fam := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		what, err := family(ctx, fam)
		if errors.Is(err, iptables.ErrNotInstalled) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
		}
		removed = append(removed, what...)
	}
	return removed, errors.Join(errs...)
}

func (m *iptablesMasq) cleanupFamily(ctx context.Context, fam iptables.Family) ([]string, error) {
	r, err := m.runner(ctx, fam)
	if err != nil {
		return nil, err
	}
	st, err := readMasqState(ctx, r)
	if err != nil {
		return nil, err
	}
	var removed []string
	b := iptables.NewBatch()
	for _, j := range st.natJumps {
		b.Delete("nat", "POSTROUTING", j)
	}
	for _, j := range st.fwdJumps {
		b.Delete("filter", "FORWARD", j)
	}
	if n := len(st.natJumps) + len(st.fwdJumps); n > 0 {
		removed = append(removed, fmt.Sprintf("%s %d jump(s) to our chains", fam, n))
	}
	if st.natChain {
		b.DeleteChain("nat", chainMasq)
		removed = append(removed, fmt.Sprintf("%s chain nat %s", fam, chainMasq))
	}
	if st.fwdChain {
		b.DeleteChain("filter", chainFwd)
		removed = append(removed, fmt.Sprintf("%s chain filter %s", fam, chainFwd))
	}
	if b.Empty() {
		return nil, nil
	}
	if err := r.Restore(ctx, b.Bytes()); err != nil {
		return nil, fmt.Errorf("remove %s masquerade rules: %w", fam, err)
	}
	delete(m.last, fam)
	return removed, nil
}
