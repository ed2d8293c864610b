package iptables

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) { os.Exit(nettest.CheckNoLeaks(m)) }

func TestGoldenRules(t *testing.T) {
	proxytest.CheckGoldenRules(t, ".txt", *update, func(_ *testing.T, fam proxy.Family) (proxy.DataPlane, func() string) {
		f := ipt.NewFake()
		return New(fam, f, nil), f.Dump
	})
}

func v4(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestTracer(t *testing.T) {
	f := ipt.NewFake()
	p := New(proxy.IPv4, f, nil)
	if _, err := p.Sync(context.Background(), proxytest.Snapshot(proxy.IPv4, proxytest.GoldenServices(proxy.IPv4)...), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	proxytest.CheckGoldenTraces(t, func(t *testing.T, p proxytest.Packet) []proxytest.Outcome { return trace(t, f, p) })
}

// TestPartialEqualsFull drives random changes through partial syncs and
// checks after each that the tables equal a from-scratch full sync.
func TestPartialEqualsFull(t *testing.T) {
	ctx := context.Background()
	f := ipt.NewFake()
	p := New(proxy.IPv4, f, nil)
	churn := proxytest.NewChurn(proxytest.ChurnOpts{})
	if _, err := p.Sync(ctx, churn.Snapshot(), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	for round := range 60 {
		snap, cs := churn.Next()
		if _, err := p.Sync(ctx, snap, cs); err != nil {
			t.Fatalf("round %d: partial sync: %v\n%s", round, err, f.LastData)
		}
		ref := ipt.NewFake()
		if _, err := New(proxy.IPv4, ref, nil).Sync(ctx, snap, proxytest.Full); err != nil {
			t.Fatal(err)
		}
		if got, want := sortedDump(f), sortedDump(ref); got != want {
			t.Fatalf("round %d: partial sync diverged from full sync\npartial:\n%s\nfull:\n%s", round, got, want)
		}
	}
}

// sortedDump renders a dump with each chain's rules sorted where order does
// not matter (shared chains), so partial and full syncs compare equal.
func sortedDump(f *ipt.Fake) string {
	var sb strings.Builder
	for _, table := range []string{"filter", "nat"} {
		for _, c := range f.Chains(table) {
			rules := f.Rules(table, c)
			if c == chainServices || c == chainNodePorts || c == chainFirewall {
				last := ""
				if table == "nat" && c == chainServices && len(rules) > 0 && strings.Contains(rules[len(rules)-1], "-j "+chainNodePorts) {
					last, rules = rules[len(rules)-1], rules[:len(rules)-1]
				}
				rules = slices.Sorted(slices.Values(rules))
				if last != "" {
					rules = append(rules, last)
				}
			}
			fmt.Fprintf(&sb, "%s/%s\n", table, c)
			for _, r := range rules {
				fmt.Fprintf(&sb, "  %s\n", r)
			}
		}
	}
	return sb.String()
}

func TestFullSyncRemovesStaleChainsAndRestoresHooks(t *testing.T) {
	ctx := context.Background()
	f := ipt.NewFake()
	web := proxytest.Port("default", "web", "10.96.0.10", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.2"))
	gone := proxytest.Port("default", "gone", "10.96.0.11", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.3"))
	if _, err := New(proxy.IPv4, f, nil).Sync(ctx, proxytest.Snapshot(proxy.IPv4, web, gone), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	// Another proxy's rules and someone deleting a hook.
	if err := f.Restore(ctx, []byte("*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-D OUTPUT "+hooks[1].rule+"\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	// A restarted proxy: fresh state, first sync is full.
	p := New(proxy.IPv4, f, nil)
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web), proxytest.Changed()); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Chains("nat") {
		if c == svcChain(gone.Name) {
			t.Errorf("stale chain %s survived", c)
		}
	}
	if !slices.Contains(f.Chains("nat"), "KUBE-SERVICES") || len(f.Rules("nat", "PREROUTING")) != 2 {
		t.Errorf("another proxy's rules were touched: %v", f.Rules("nat", "PREROUTING"))
	}
	if out := f.Rules("nat", "OUTPUT"); len(out) != 1 || out[0] != hooks[1].rule {
		t.Errorf("OUTPUT hook not restored: %v", out)
	}
	// Idempotent: another full sync writes the same thing and adds no hook.
	before, restores := f.Dump(), f.Restores
	res, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web), proxytest.Full)
	if err != nil {
		t.Fatal(err)
	}
	if f.Dump() != before || res.Written != 0 || f.Restores != restores {
		t.Errorf("second full sync rewrote rules (written %d, restores %d → %d)", res.Written, restores, f.Restores)
	}
	if res.Total == 0 {
		t.Error("total rules not reported")
	}
	// A restarted proxy converging on a partially drifted table rewrites
	// only the drifted chain.
	if err := f.Restore(ctx, []byte("*nat\n-A "+svcChain(web.Name)+" -j RETURN\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	res, err = New(proxy.IPv4, f, nil).Sync(ctx, proxytest.Snapshot(proxy.IPv4, web), proxytest.Full)
	if err != nil {
		t.Fatal(err)
	}
	if f.Dump() != before || res.Written != len(f.Rules("nat", svcChain(web.Name))) {
		t.Errorf("repair wrote %d rules, want only the drifted chain's %d", res.Written, len(f.Rules("nat", svcChain(web.Name))))
	}
	// Cleanup removes ours, keeps theirs.
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"nat", "filter"} {
		for _, c := range f.Chains(table) {
			if strings.HasPrefix(c, Prefix) {
				t.Errorf("cleanup left %s/%s", table, c)
			}
		}
	}
	if d := f.Dump(); strings.Contains(d, "NODENET") || !strings.Contains(d, "KUBE-SERVICES") {
		t.Errorf("after cleanup:\n%s", d)
	}
}

func TestFakeRejectsWhatTheKernelRejects(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, in string }{
		{"jump to a missing chain", "*nat\n:A - [0:0]\n-A A -j NOPE\nCOMMIT\n"},
		{"rule in a missing chain", "*nat\n-A NOPE -j ACCEPT\nCOMMIT\n"},
		{"delete a missing rule", "*nat\n:A - [0:0]\n-D A -s 10.0.0.1/32 -j ACCEPT\nCOMMIT\n"},
		{"delete a referenced chain", "*nat\n:A - [0:0]\n:B - [0:0]\n-A A -j B\n-X B\nCOMMIT\n"},
		{"MASQUERADE reachable from PREROUTING", "*nat\n:A - [0:0]\n-A PREROUTING -j A\n-A A -j MASQUERADE\nCOMMIT\n"},
		{"chain name too long", "*nat\n:NODENET-SVC-ABCDEFGHIJKLMNOPQ - [0:0]\nCOMMIT\n"},
		{"port without protocol", "*nat\n:A - [0:0]\n-A A --dport 80 -j ACCEPT\nCOMMIT\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := ipt.NewFake()
			before := f.Dump()
			if err := f.Restore(ctx, []byte(tc.in)); err == nil {
				t.Fatal("accepted")
			}
			if f.Dump() != before {
				t.Error("a failed restore changed state")
			}
		})
	}
}

func TestSyncFailureForcesFullResync(t *testing.T) {
	ctx := context.Background()
	f := ipt.NewFake()
	p := New(proxy.IPv4, f, nil)
	web := proxytest.Port("default", "web", "10.96.0.10", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.2"))
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	// Someone flushes our chain behind our back: the partial -D fails.
	if err := f.Restore(ctx, []byte("*nat\n:"+chainServices+" - [0:0]\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	web2 := proxytest.Port("default", "web", "10.96.0.10", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.5"))
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4), proxytest.Changed(web2.Name)); err == nil {
		t.Fatal("partial sync on a flushed chain succeeded")
	}
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web2), proxytest.Changed()); err != nil {
		t.Fatalf("recovery sync: %v", err)
	}
	if got := proxytest.Summarize(trace(t, f, proxytest.Packet{Src: v4("10.244.0.1"), Dst: v4("10.96.0.10"), Proto: "tcp", Dport: 80})); got != "[ACCEPT dnat=10.244.1.5:8080]" {
		t.Errorf("after recovery: %s", got)
	}
}
