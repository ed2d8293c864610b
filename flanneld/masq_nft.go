package flanneld

import (
	"context"
	"fmt"
	"strings"
)

// nftTables keeps one nftables table of ours per family (ip/ip6 name),
// each from a script that replaces the whole table in one nft transaction
// (add, delete, define), so there is never a moment without the rules.
// The masquerade rules (nftRuleset) and the vxlan notrack rules
// (noTrackRuleset) are each one.
type nftTables struct {
	ns      Netns
	name    string          // the table's name in both families
	what    string          // what its rules are, for errors
	scripts map[bool]string // per family (true: ip, false: ip6)
	last    map[bool]string
}

func newNFTMasq(ns Netns, families []masqFamily) *nftTables {
	t := &nftTables{ns: ns, name: nftTable, what: "masquerade", scripts: map[bool]string{}, last: map[bool]string{}}
	for _, f := range families {
		t.scripts[f.is4] = nftRuleset(f)
	}
	return t
}

func nftFamily(is4 bool) string {
	if is4 {
		return "ip"
	}
	return "ip6"
}

func (t *nftTables) list(ctx context.Context, is4 bool) string {
	out, err := t.ns.Run(ctx, nil, "nft", "list", "table", nftFamily(is4), t.name)
	if err != nil {
		return ""
	}
	return string(out)
}

func (t *nftTables) Sync(ctx context.Context) (bool, error) {
	changed := false
	for _, is4 := range []bool{true, false} {
		script, ok := t.scripts[is4]
		if !ok {
			continue
		}
		cur := t.list(ctx, is4)
		if cur != "" && cur == t.last[is4] {
			continue
		}
		if _, err := t.ns.Run(ctx, []byte(script), "nft", "-f", "-"); err != nil {
			return changed, fmt.Errorf("install %s rules: %w\n%s", t.what, err, script)
		}
		changed = true
		t.last[is4] = t.list(ctx, is4)
	}
	return changed, nil
}

func (t *nftTables) Cleanup(ctx context.Context) ([]string, error) {
	var removed []string
	for _, is4 := range []bool{true, false} {
		if t.list(ctx, is4) == "" {
			continue
		}
		script := fmt.Sprintf("delete table %s %s\n", nftFamily(is4), t.name)
		if _, err := t.ns.Run(ctx, []byte(script), "nft", "-f", "-"); err != nil && !strings.Contains(err.Error(), "No such file") {
			return removed, fmt.Errorf("remove %s table: %w", t.what, err)
		}
		delete(t.last, is4)
		removed = append(removed, fmt.Sprintf("nftables table %s %s", nftFamily(is4), t.name))
	}
	return removed, nil
}
