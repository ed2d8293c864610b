package flanneld

import (
	"context"
	"fmt"
	"strings"
)

// nftMasq keeps one table per family (ip/ip6 nodenet-flannel) with a nat
// postrouting chain and a filter forward chain. A write replaces the whole
// table in one nft transaction (add, delete, define), so there is never a
// moment without the rules.
type nftMasq struct {
	ns       Netns
	families []masqFamily
	last     map[bool]string
}

func newNFTMasq(ns Netns, families []masqFamily) *nftMasq {
	return &nftMasq{ns: ns, families: families, last: map[bool]string{}}
}

func nftFamily(is4 bool) string {
	if is4 {
		return "ip"
	}
	return "ip6"
}

func (m *nftMasq) list(ctx context.Context, is4 bool) string {
	out, err := m.ns.Run(ctx, nil, "nft", "list", "table", nftFamily(is4), nftTable)
	if err != nil {
		return ""
	}
	return string(out)
}

func (m *nftMasq) Sync(ctx context.Context) (bool, error) {
	changed := false
	for _, f := range m.families {
		cur := m.list(ctx, f.is4)
		if cur != "" && cur == m.last[f.is4] {
			continue
		}
		script := nftRuleset(f)
		if _, err := m.ns.Run(ctx, []byte(script), "nft", "-f", "-"); err != nil {
			return changed, fmt.Errorf("install masquerade rules: %w\n%s", err, script)
		}
		changed = true
		m.last[f.is4] = m.list(ctx, f.is4)
	}
	return changed, nil
}

func (m *nftMasq) Cleanup(ctx context.Context) ([]string, error) {
	var removed []string
	for _, is4 := range []bool{true, false} {
		if m.list(ctx, is4) == "" {
			continue
		}
		script := fmt.Sprintf("delete table %s %s\n", nftFamily(is4), nftTable)
		if _, err := m.ns.Run(ctx, []byte(script), "nft", "-f", "-"); err != nil && !strings.Contains(err.Error(), "No such file") {
			return removed, fmt.Errorf("remove masquerade table: %w", err)
		}
		delete(m.last, is4)
		removed = append(removed, fmt.Sprintf("nftables table %s %s", nftFamily(is4), nftTable))
	}
	return removed, nil
}
