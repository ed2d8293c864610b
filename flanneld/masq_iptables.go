package flanneld

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
)

// iptablesMasq keeps our chains in the nat and filter tables with
// iptables-restore --noflush, as kube-proxy does: declaring a chain in the
// input flushes it, so the chain is rewritten in one atomic step, and the
// jump from POSTROUTING/FORWARD is added once and any duplicate removed.
type iptablesMasq struct {
	ns       Netns
	families []masqFamily
	// last is what the kernel showed right after our last write, per
	// family; a resync that sees the same writes nothing.
	last map[bool]string
}

func newIPTablesMasq(ns Netns, families []masqFamily) *iptablesMasq {
	return &iptablesMasq{ns: ns, families: families, last: map[bool]string{}}
}

func iptablesCmds(is4 bool) (save, restore string) {
	if is4 {
		return "iptables-save", "iptables-restore"
	}
	return "ip6tables-save", "ip6tables-restore"
}

// ourState extracts, from iptables-save output, our chains' rules and the
// jumps to them, in order.
func ourState(save []byte) (rules []string, natJumps, fwdJumps []string) {
	table := ""
	for _, line := range strings.Split(string(save), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, "-A "+chainMasq+" "), strings.HasPrefix(line, "-A "+chainFwd+" "):
			rules = append(rules, table+" "+line)
		case table == "nat" && strings.HasPrefix(line, "-A POSTROUTING ") && strings.HasSuffix(line, "-j "+chainMasq):
			natJumps = append(natJumps, line)
		case table == "filter" && strings.HasPrefix(line, "-A FORWARD ") && strings.HasSuffix(line, "-j "+chainFwd):
			fwdJumps = append(fwdJumps, line)
		}
	}
	return rules, natJumps, fwdJumps
}

func (m *iptablesMasq) save(ctx context.Context, is4 bool) ([]byte, error) {
	save, _ := iptablesCmds(is4)
	var out []byte
	for _, t := range []string{"nat", "filter"} {
		b, err := m.ns.Run(ctx, nil, save, "-t", t)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

func (m *iptablesMasq) Sync(ctx context.Context) (bool, error) {
	changed := false
	for _, f := range m.families {
		saved, err := m.save(ctx, f.is4)
		if err != nil {
			return changed, err
		}
		rules, natJumps, fwdJumps := ourState(saved)
		state := strings.Join(rules, "\n")
		if len(natJumps) == 1 && len(fwdJumps) == 1 && state == m.last[f.is4] && state != "" {
			continue
		}
		nat, filter := iptablesRules(f)
		var in bytes.Buffer
		writeTable(&in, "nat", chainMasq, "POSTROUTING", commentMasq, nat, natJumps)
		writeTable(&in, "filter", chainFwd, "FORWARD", commentFwd, filter, fwdJumps)
		_, restore := iptablesCmds(f.is4)
		if _, err := m.ns.Run(ctx, in.Bytes(), restore, "--noflush", "-w", "5"); err != nil {
			return changed, fmt.Errorf("install masquerade rules: %w\n%s", err, in.String())
		}
		changed = true
		saved, err = m.save(ctx, f.is4)
		if err != nil {
			return changed, err
		}
		rules, _, _ = ourState(saved)
		m.last[f.is4] = strings.Join(rules, "\n")
	}
	return changed, nil
}

// writeTable emits one table of an iptables-restore --noflush input: the
// chain (flushed by its declaration) and its rules, the jump if missing,
// and deletes for duplicate jumps.
func writeTable(b *bytes.Buffer, table, chain, hook, comment string, rules, jumps []string) {
	fmt.Fprintf(b, "*%s\n:%s - [0:0]\n", table, chain)
	for _, r := range rules {
		fmt.Fprintln(b, r)
	}
	if len(jumps) == 0 {
		fmt.Fprintf(b, "-I %s 1 -m comment --comment \"%s\" -j %s\n", hook, comment, chain)
	}
	for _, j := range slices.Clone(jumps[min(1, len(jumps)):]) {
		fmt.Fprintln(b, "-D"+strings.TrimPrefix(j, "-A"))
	}
	fmt.Fprintln(b, "COMMIT")
}

// Cleanup removes the jumps and our chains, in every family.
func (m *iptablesMasq) Cleanup(ctx context.Context) error {
	for _, is4 := range []bool{true, false} {
		saved, err := m.save(ctx, is4)
		if err != nil {
			return err
		}
		rules, natJumps, fwdJumps := ourState(saved)
		has := func(chain string) bool {
			return strings.Contains(string(saved), ":"+chain+" ")
		}
		if len(rules)+len(natJumps)+len(fwdJumps) == 0 && !has(chainMasq) && !has(chainFwd) {
			continue
		}
		var in bytes.Buffer
		for _, t := range []struct {
			table, chain string
			jumps        []string
		}{{"nat", chainMasq, natJumps}, {"filter", chainFwd, fwdJumps}} {
			fmt.Fprintf(&in, "*%s\n", t.table)
			for _, j := range t.jumps {
				fmt.Fprintln(&in, "-D"+strings.TrimPrefix(j, "-A"))
			}
			if has(t.chain) {
				fmt.Fprintf(&in, ":%s - [0:0]\n-X %s\n", t.chain, t.chain)
			}
			fmt.Fprintln(&in, "COMMIT")
		}
		_, restore := iptablesCmds(is4)
		if _, err := m.ns.Run(ctx, in.Bytes(), restore, "--noflush", "-w", "5"); err != nil {
			return fmt.Errorf("remove masquerade rules: %w", err)
		}
		delete(m.last, is4)
	}
	return nil
}
