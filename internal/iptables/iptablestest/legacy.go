package iptablestest

import (
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

// LegacyNode returns a throwaway namespace whose firewall lives in
// iptables-legacy — one rule per family in the filter table, as on a host
// that uses the legacy backend — and nothing in iptables-nft. It gates on
// both backends' tools for both families (a skip without them, a failure
// under NODENET_PRIVILEGED=1).
func LegacyNode(t testing.TB) *nettest.NS {
	t.Helper()
	for _, family := range []string{"iptables", "ip6tables"} {
		for _, backend := range []string{"-legacy", "-nft"} {
			for _, tool := range []string{"", "-save", "-restore"} {
				nettest.RequireTool(t, family+backend+tool)
			}
		}
	}
	ns := nettest.New(t)
	ns.MustExec(t, "iptables-legacy", "-w", "-A", "INPUT", "-j", "ACCEPT")
	ns.MustExec(t, "ip6tables-legacy", "-w", "-A", "INPUT", "-j", "ACCEPT")
	return ns
}
