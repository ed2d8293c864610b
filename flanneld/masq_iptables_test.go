package flanneld

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/testapi"
)

// The iptables masquerader against internal/iptables' Fake, which the
// contract test holds to the real iptables-nft and iptables-legacy:
// the rules of each configuration, idempotent re-syncs, repair of what
// was changed behind its back, a restart, and removal.

var (
	masqV4 = masqFamily{is4: true, network: netip.MustParsePrefix("10.244.0.0/16"), subnet: netip.MustParsePrefix("10.244.3.0/24")}
	masqV6 = masqFamily{network: netip.MustParsePrefix("fd00:10:244::/56"), subnet: netip.MustParsePrefix("fd00:10:244:3::/64")}
)

// fakeTables is one Fake per family and the opener that hands them out.
type fakeTables struct {
	fakes map[iptables.Family]*iptables.Fake
	opens map[iptables.Family]int
	fail  error // returned by open when set
}

func newFakeTables() *fakeTables {
	return &fakeTables{
		fakes: map[iptables.Family]*iptables.Fake{iptables.IPv4: iptables.NewFake(), iptables.IPv6: iptables.NewFake()},
		opens: map[iptables.Family]int{},
	}
}

func (ft *fakeTables) open(_ context.Context, f iptables.Family) (iptables.Runner, error) {
	if ft.fail != nil {
		return nil, ft.fail
	}
	ft.opens[f]++
	return ft.fakes[f], nil
}

func (ft *fakeTables) restores() int {
	return ft.fakes[iptables.IPv4].Restores + ft.fakes[iptables.IPv6].Restores
}

// restore changes a Fake behind the masquerader's back.
func (ft *fakeTables) restore(t *testing.T, f iptables.Family, data string) {
	t.Helper()
	if err := ft.fakes[f].Restore(t.Context(), []byte(data)); err != nil {
		t.Fatal(err)
	}
}

// wantMasqDump is the Fake's dump with exactly our rules for f.
func wantMasqDump(f masqFamily) string {
	nw, sn, mc := f.network, f.subnet, f.multicast()
	return fmt.Sprintf(`*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:NODENET-FLANNEL-FWD - [0:0]
-A FORWARD -m comment --comment "nodenet flanneld forward" -j NODENET-FLANNEL-FWD
-A NODENET-FLANNEL-FWD -s %[1]s -m comment --comment "nodenet flanneld forward" -j ACCEPT
-A NODENET-FLANNEL-FWD -d %[1]s -m comment --comment "nodenet flanneld forward" -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:NODENET-FLANNEL-MASQ - [0:0]
-A POSTROUTING -m comment --comment "nodenet flanneld masq" -j NODENET-FLANNEL-MASQ
-A NODENET-FLANNEL-MASQ -m mark --mark 0x4000/0x4000 -m comment --comment "nodenet flanneld masq" -j RETURN
-A NODENET-FLANNEL-MASQ -s %[2]s -d %[1]s -m comment --comment "nodenet flanneld masq" -j RETURN
-A NODENET-FLANNEL-MASQ -s %[1]s -d %[2]s -m comment --comment "nodenet flanneld masq" -j RETURN
-A NODENET-FLANNEL-MASQ ! -s %[1]s -d %[2]s -m comment --comment "nodenet flanneld masq" -j RETURN
-A NODENET-FLANNEL-MASQ -s %[1]s ! -d %[3]s -m comment --comment "nodenet flanneld masq" -j MASQUERADE --random-fully
-A NODENET-FLANNEL-MASQ ! -s %[1]s -d %[1]s -m comment --comment "nodenet flanneld masq" -j MASQUERADE --random-fully
COMMIT
`, nw, sn, mc)
}

const emptyDump = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n" +
	"*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n"

func checkDump(t *testing.T, ft *fakeTables, f iptables.Family, want string) {
	t.Helper()
	if got := ft.fakes[f].Dump(); got != want {
		t.Fatalf("%s tables:\n%s\nwant:\n%s", f, got, want)
	}
}

// TestMasqIPTablesConfigs: each configuration gets its families' rules in
// one restore per family and nothing in the other family; the backend is
// chosen once per family.
func TestMasqIPTablesConfigs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		families []masqFamily
	}{
		{"IPv4", []masqFamily{masqV4}},
		{"IPv6", []masqFamily{masqV6}},
		{"dual-stack", []masqFamily{masqV4, masqV6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := newFakeTables()
			m := newIPTablesMasq(ft.open, tc.families)
			mustSync(t, t.Context(), m, true)
			mustSync(t, t.Context(), m, false)
			want := map[iptables.Family]string{iptables.IPv4: emptyDump, iptables.IPv6: emptyDump}
			for _, f := range tc.families {
				want[f.family()] = wantMasqDump(f)
				if ft.fakes[f.family()].Restores != 1 || ft.opens[f.family()] != 1 {
					t.Errorf("%s: %d restores, %d opens; want 1 and 1", f.family(), ft.fakes[f.family()].Restores, ft.opens[f.family()])
				}
			}
			for f, d := range want {
				checkDump(t, ft, f, d)
			}
		})
	}
}

// TestMasqIPTablesRepair: whatever is changed behind the daemon's back —
// a rule deleted, the chain flushed or gone, the jump gone or doubled —
// the next sync restores exactly our rules, and only then writes.
func TestMasqIPTablesRepair(t *testing.T) {
	nat, _ := iptablesRules(masqV6)
	jump := `-m comment --comment "nodenet flanneld masq" -j NODENET-FLANNEL-MASQ`
	fwdJump := `-m comment --comment "nodenet flanneld forward" -j NODENET-FLANNEL-FWD`
	for name, damage := range map[string]string{
		"rule deleted":  "*nat\n-D NODENET-FLANNEL-MASQ " + nat[2] + "\nCOMMIT\n",
		"rule added":    "*nat\n-A NODENET-FLANNEL-MASQ -j RETURN\nCOMMIT\n",
		"chain flushed": "*filter\n:NODENET-FLANNEL-FWD - [0:0]\nCOMMIT\n",
		"jump deleted":  "*nat\n-D POSTROUTING " + jump + "\nCOMMIT\n",
		"jump doubled":  "*filter\n-A FORWARD " + fwdJump + "\nCOMMIT\n",
		"chain removed": "*nat\n-D POSTROUTING " + jump + "\n:NODENET-FLANNEL-MASQ - [0:0]\n-X NODENET-FLANNEL-MASQ\nCOMMIT\n",
	} {
		t.Run(name, func(t *testing.T) {
			ft := newFakeTables()
			m := newIPTablesMasq(ft.open, []masqFamily{masqV4, masqV6})
			mustSync(t, t.Context(), m, true)
			ft.restore(t, iptables.IPv6, damage)
			mustSync(t, t.Context(), m, true)
			checkDump(t, ft, iptables.IPv6, wantMasqDump(masqV6))
			checkDump(t, ft, iptables.IPv4, wantMasqDump(masqV4))
			before := ft.restores()
			mustSync(t, t.Context(), m, false)
			if ft.restores() != before {
				t.Error("a sync after the repair wrote again")
			}
		})
	}
}

// TestMasqIPTablesRestart: a restarted daemon (no memory of its last
// write) finds the rules in place, rewrites them once, atomically, and
// never duplicates the jumps; rules of others stay untouched.
func TestMasqIPTablesRestart(t *testing.T) {
	ft := newFakeTables()
	ft.restore(t, iptables.IPv4, "*nat\n:KUBE-POSTROUTING - [0:0]\n-A POSTROUTING -j KUBE-POSTROUTING\n-A KUBE-POSTROUTING -j RETURN\nCOMMIT\n")
	mustSync(t, t.Context(), newIPTablesMasq(ft.open, []masqFamily{masqV4}), true)
	restarted := newIPTablesMasq(ft.open, []masqFamily{masqV4})
	mustSync(t, t.Context(), restarted, true)
	mustSync(t, t.Context(), restarted, false)
	want := strings.Replace(wantMasqDump(masqV4), ":NODENET-FLANNEL-MASQ - [0:0]\n-A POSTROUTING",
		":KUBE-POSTROUTING - [0:0]\n:NODENET-FLANNEL-MASQ - [0:0]\n-A POSTROUTING", 1)
	want = strings.Replace(want, "-j NODENET-FLANNEL-MASQ\n-A NODENET", "-j NODENET-FLANNEL-MASQ\n-A POSTROUTING -j KUBE-POSTROUTING\n-A KUBE-POSTROUTING -j RETURN\n-A NODENET", 1)
	checkDump(t, ft, iptables.IPv4, want)
}

// TestMasqIPTablesCleanup removes our jumps and chains in both families,
// whatever the configuration, leaves others' rules, and writes nothing
// when there is nothing of ours.
func TestMasqIPTablesCleanup(t *testing.T) {
	ft := newFakeTables()
	mustSync(t, t.Context(), newIPTablesMasq(ft.open, []masqFamily{masqV4, masqV6}), true)
	ft.restore(t, iptables.IPv6, "*nat\n:KUBE-POSTROUTING - [0:0]\n-A POSTROUTING -j KUBE-POSTROUTING\nCOMMIT\n")
	m := newIPTablesMasq(ft.open, []masqFamily{masqV4})
	removed, err := m.Cleanup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Both families: the chains and the jumps of each.
	if len(removed) != 6 {
		t.Errorf("reported %q, want 3 entries per family", removed)
	}
	checkDump(t, ft, iptables.IPv4, emptyDump)
	checkDump(t, ft, iptables.IPv6, strings.Replace(emptyDump, ":POSTROUTING ACCEPT [0:0]\n", ":POSTROUTING ACCEPT [0:0]\n:KUBE-POSTROUTING - [0:0]\n-A POSTROUTING -j KUBE-POSTROUTING\n", 1))
	before := ft.restores()
	if removed, err := m.Cleanup(t.Context()); err != nil || ft.restores() != before || len(removed) != 0 {
		t.Errorf("second cleanup: %v, %d restores, reported %q", err, ft.restores()-before, removed)
	}
}

// TestMasqIPTablesOpenFails: without a usable iptables the sync fails,
// saying why, and the next sync tries again.
func TestMasqIPTablesOpenFails(t *testing.T) {
	ft := newFakeTables()
	ft.fail = fmt.Errorf("detect the iptables backend for IPv4: %w", iptables.ErrNotInstalled)
	m := newIPTablesMasq(ft.open, []masqFamily{masqV4})
	if _, err := m.Sync(t.Context()); !errors.Is(err, iptables.ErrNotInstalled) {
		t.Fatalf("Sync: %v, want ErrNotInstalled", err)
	}
	ft.fail = nil
	mustSync(t, t.Context(), m, true)
	checkDump(t, ft, iptables.IPv4, wantMasqDump(masqV4))
}

// recordingMasq is a masquerader that only notes what was asked of it.
type recordingMasq struct{ cleaned bool }

func (r *recordingMasq) Sync(context.Context) (bool, error) { return false, nil }
func (r *recordingMasq) Cleanup(context.Context) ([]string, error) {
	r.cleaned = true
	return nil, nil
}

// TestChooseMasquerader: --ip-masq off removes the rules of both backends;
// on, the chosen backend is returned and the other one's rules removed.
func TestChooseMasquerader(t *testing.T) {
	for _, tc := range []struct {
		ipMasq      bool
		backend     string
		want        string // "iptables", "nftables" or "" (none)
		iptRulesYet bool   // our iptables rules survive
	}{
		{false, MasqIPTables, "", false},
		{true, MasqIPTables, "iptables", true},
		{true, MasqNFTables, "nftables", false},
	} {
		t.Run(fmt.Sprintf("ip-masq=%v/%s", tc.ipMasq, tc.backend), func(t *testing.T) {
			ft := newFakeTables()
			ipt := newIPTablesMasq(ft.open, []masqFamily{masqV4})
			mustSync(t, t.Context(), ipt, true)
			nft := &recordingMasq{}
			got := chooseMasquerader(t.Context(), tc.ipMasq, tc.backend, ipt, nft, testapi.Logger())
			name := map[masquerader]string{nil: "", ipt: "iptables", nft: "nftables"}[got]
			if name != tc.want {
				t.Errorf("chose %q, want %q", name, tc.want)
			}
			if nft.cleaned != (tc.want != "nftables") {
				t.Errorf("nftables cleaned = %v", nft.cleaned)
			}
			want := emptyDump
			if tc.iptRulesYet {
				want = wantMasqDump(masqV4)
			}
			checkDump(t, ft, iptables.IPv4, want)
		})
	}
}
