package nettest

import (
	"regexp"
	"strconv"
	"testing"
)

var nftPackets = regexp.MustCompile(`packets (\d+)`)

// NFTPackets is the packet count of the first counter in an nftables chain
// inside ns (`nft list chain <family> <table> <chain>`).
func NFTPackets(t testing.TB, ns *NS, family, table, chain string) int {
	t.Helper()
	out := ns.MustExec(t, "nft", "list", "chain", family, table, chain)
	m := nftPackets.FindSubmatch(out)
	if m == nil {
		t.Fatalf("nettest: no counter in chain %s %s %s of netns %s:\n%s", family, table, chain, ns.Name(), out)
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
