package nftables

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) { os.Exit(nettest.CheckNoLeaks(m)) }

func famName(fam proxy.Family) string {
	if fam == proxy.IPv6 {
		return "ip6"
	}
	return "ip"
}

func TestGoldenRuleset(t *testing.T) {
	proxytest.CheckGoldenRules(t, ".nft", *update, func(t *testing.T, fam proxy.Family) (proxy.DataPlane, func() string) {
		f := NewFake()
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("last script:\n%s", f.LastScript)
			}
		})
		return New(fam, f, nil), f.Dump
	})
}

func TestTracer(t *testing.T) {
	f := NewFake()
	p := New(proxy.IPv4, f, nil)
	if _, err := p.Sync(context.Background(), proxytest.Snapshot(proxy.IPv4, proxytest.GoldenServices(proxy.IPv4)...), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	tr := func(t *testing.T, p proxytest.Packet) []proxytest.Outcome { return trace(t, f, "ip", p) }
	proxytest.CheckGoldenTraces(t, tr)
	node := []netip.Addr{v4("192.168.0.2"), v4("127.0.0.1")}
	proxytest.CheckTraces(t, tr, []proxytest.TraceCase{
		{Name: "NodePort on loopback: untouched",
			Packet: proxytest.Packet{Src: v4("127.0.0.1"), Dst: v4("127.0.0.1"), Proto: "tcp", Dport: 30080, Addrs: node},
			Want:   "[ACCEPT]"},
	})
}

func TestTracerNodePortAddressesAndMasqueradeAll(t *testing.T) {
	f := NewFake()
	snap := proxytest.Snapshot(proxy.IPv4, proxytest.Port("default", "np", "10.96.0.20", 80, proxy.TCP, proxytest.WithNodePort(30080), proxytest.WithEndpoints(8080, "10.244.1.3")))
	snap.NodePorts = proxy.NodePorts{Addrs: []netip.Addr{v4("192.168.0.2")}}
	snap.MasqueradeAll = true
	if _, err := New(proxy.IPv4, f, nil).Sync(context.Background(), snap, proxytest.Full); err != nil {
		t.Fatal(err)
	}
	node := []netip.Addr{v4("192.168.0.2"), v4("192.168.1.2")}
	proxytest.CheckTraces(t, func(t *testing.T, p proxytest.Packet) []proxytest.Outcome { return trace(t, f, "ip", p) }, []proxytest.TraceCase{
		{Name: "NodePort on a --nodeport-addresses address", Packet: proxytest.Packet{Src: v4("172.16.0.1"), Dst: v4("192.168.0.2"), Proto: "tcp", Dport: 30080, Addrs: node}, Want: "[ACCEPT dnat=10.244.1.3:8080 masq]"},
		{Name: "NodePort on another local address", Packet: proxytest.Packet{Src: v4("172.16.0.1"), Dst: v4("192.168.1.2"), Proto: "tcp", Dport: 30080, Addrs: node}, Want: "[ACCEPT]"},
		{Name: "masquerade-all: even pods", Packet: proxytest.Packet{Src: v4("10.244.0.9"), Dst: v4("10.96.0.20"), Proto: "tcp", Dport: 80}, Want: "[ACCEPT dnat=10.244.1.3:8080 masq]"},
	})
}

// normalized is a listing reduced to what must agree: objects sorted by
// name, elements sorted, rules in order.
func normalized(listing string) string {
	type obj struct{ head, body string }
	var objs []obj
	var cur *obj
	var elems []string
	inElems := false
	flushElems := func() {
		var kept []string
		for _, e := range elems {
			if e = strings.TrimSpace(e); e != "" {
				kept = append(kept, e)
			}
		}
		elems = kept
		slices.Sort(elems)
		cur.body += "\t\telements = { " + strings.Join(elems, ", ") + " }\n"
		elems, inElems = nil, false
	}
	for _, l := range strings.Split(listing, "\n") {
		tl := strings.TrimSpace(l)
		switch {
		case tl == "" || strings.HasPrefix(tl, "table ") || tl == "}" && cur == nil:
		case cur == nil && strings.HasSuffix(tl, "{"):
			objs = append(objs, obj{head: tl})
			cur = &objs[len(objs)-1]
		case inElems:
			elems = append(elems, strings.Split(strings.TrimSuffix(tl, "}"), ",")...)
			if strings.HasSuffix(tl, "}") {
				flushElems()
			}
		case strings.HasPrefix(tl, "elements = {"):
			rest := strings.TrimPrefix(tl, "elements = {")
			inElems = true
			elems = append(elems, strings.Split(strings.TrimSuffix(rest, "}"), ",")...)
			if strings.HasSuffix(rest, "}") {
				flushElems()
			}
		case tl == "}":
			cur = nil
		default:
			cur.body += "\t\t" + tl + "\n"
		}
	}
	heads := make([]string, 0, len(objs))
	byHead := map[string]string{}
	for _, o := range objs {
		heads = append(heads, o.head)
		byHead[o.head] = o.body
	}
	slices.Sort(heads)
	var sb strings.Builder
	for _, h := range heads {
		sb.WriteString(h + "\n" + byHead[h])
	}
	return sb.String()
}

// TestPartialEqualsFull drives random changes through partial syncs and
// checks after each that the table equals a from-scratch full sync.
func TestPartialEqualsFull(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	p := New(proxy.IPv4, f, nil)
	// A shared external IP: only one service may own it.
	churn := proxytest.NewChurn(proxytest.ChurnOpts{VaryAffinity: true, SharedExternalIP: "198.51.100.1"})
	if _, err := p.Sync(ctx, churn.Snapshot(), proxytest.Full); err != nil {
		t.Fatalf("%v\n%s", err, f.LastScript)
	}
	for round := range 80 {
		snap, cs := churn.Next()
		if _, err := p.Sync(ctx, snap, cs); err != nil {
			t.Fatalf("round %d: partial sync: %v\n%s", round, err, f.LastScript)
		}
		ref := NewFake()
		if _, err := New(proxy.IPv4, ref, nil).Sync(ctx, snap, proxytest.Full); err != nil {
			t.Fatal(err)
		}
		got, want := normalized(f.Dump()), normalized(ref.Dump())
		if got != want && !sharedIPOnly(got, want) {
			t.Fatalf("round %d: partial sync diverged from full sync\n%s\nscript:\n%s", round, lineDiff(got, want), f.LastScript)
		}
	}
}

// sharedIPOnly accepts a difference only in who owns the contested external
// IP (partial syncs keep the earlier owner; a full sync picks by name).
func sharedIPOnly(a, b string) bool {
	strip := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "elements = {") {
				var keep []string
				for _, e := range strings.Split(strings.TrimSuffix(l, " }"), ", ") {
					if !strings.Contains(e, "198.51.100.1 ") {
						keep = append(keep, e)
					}
				}
				l = strings.Join(keep, ", ")
			}
			out = append(out, l)
		}
		return strings.Join(out, "\n")
	}
	return strip(a) == strip(b)
}

func TestFullSyncRemovesStaleObjectsAndKeepsOthers(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	web := proxytest.Port("default", "web", "10.96.0.10", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.2"))
	gone := proxytest.Port("default", "gone", "10.96.0.11", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.3"), proxytest.WithAffinity(time.Minute))
	if _, err := New(proxy.IPv4, f, nil).Sync(ctx, proxytest.Snapshot(proxy.IPv4, web, gone), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	// Someone else's table, and someone deleting one of our fixed rules.
	if err := f.Apply(ctx, []byte("add table ip other\nadd chain ip other c\nflush chain ip nodenet-proxy nat-output\n")); err != nil {
		t.Fatal(err)
	}
	// A restarted proxy: fresh state, first sync is full.
	p := New(proxy.IPv4, f, nil)
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web), proxytest.Changed()); err != nil {
		t.Fatalf("%v\n%s", err, f.LastScript)
	}
	tab := f.Table("ip", TableName)
	for _, c := range tab.Chains() {
		if strings.Contains(c, "/gone/") {
			t.Errorf("stale chain %s survived", c)
		}
	}
	for _, s := range tab.Sets() {
		if strings.Contains(s, "/gone/") {
			t.Errorf("stale set %s survived", s)
		}
	}
	if r := tab.Chain(chainNatOutput).Rules; len(r) != 1 {
		t.Errorf("nat-output not restored: %v", r)
	}
	if f.Table("ip", "other") == nil {
		t.Error("another table was touched")
	}
	before := f.Dump()
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	if f.Dump() != before {
		t.Error("second full sync changed the table")
	}
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if f.Table("ip", TableName) != nil || f.Table("ip", "other") == nil {
		t.Errorf("after cleanup:\n%s", f.Dump())
	}
	if err := p.Cleanup(ctx); err != nil {
		t.Errorf("second cleanup: %v", err)
	}
}

func TestPartialSyncIsSmall(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	p := New(proxy.IPv4, f, nil)
	var ports []*proxy.ServicePort
	for i := range 50 {
		ports = append(ports, proxytest.Port("ns", fmt.Sprint("svc", i), fmt.Sprintf("10.96.0.%d", i+1), 80, proxy.TCP,
			proxytest.WithEndpoints(8080, fmt.Sprintf("10.244.1.%d", i+1), fmt.Sprintf("10.244.2.%d", i+1))))
	}
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	// Replacing an endpoint changes only elements of data sets: it must
	// take the element path (no nft CLI, no chain re-validation).
	changedPort := proxytest.Port("ns", "svc7", "10.96.0.8", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.8", "10.244.9.9"))
	ports[7] = changedPort
	applies, batches := f.Applies, f.Batches
	res, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Changed(changedPort.Name))
	if err != nil {
		t.Fatal(err)
	}
	if f.Applies != applies || f.Batches != batches+1 {
		t.Errorf("endpoint replacement: %d nft scripts, %d batches; want 0 and 1", f.Applies-applies, f.Batches-batches)
	}
	script := string(f.LastScript)
	blk := p.blocks.byChain[serviceChain(changedPort.Name)]
	for _, l := range strings.Split(strings.TrimSpace(script), "\n") {
		if !strings.Contains(l, "/svc7/") && !strings.Contains(l, "10.244.2.8 . 10.244.2.8") && !strings.Contains(l, "10.244.9.9 . 10.244.9.9") &&
			!strings.Contains(l, "element ip nodenet-proxy "+endpointsMap(proxy.TCP, blk)+" { "+strconv.Itoa(int(blk<<slotBits)+1)) {
			t.Errorf("partial sync touched another service: %s", l)
		}
	}
	if !strings.Contains(script, " : 10.244.9.9 . 8080 }") {
		t.Errorf("partial sync script:\n%s", script)
	}
	if res.Written > 2 {
		t.Errorf("partial sync wrote %d rules/elements:\n%s", res.Written, script)
	}
	// A third endpoint rewrites the service chain's rules: still a batch.
	ports[7] = proxytest.Port("ns", "svc7", "10.96.0.8", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.8", "10.244.9.9", "10.244.9.10"))
	applies, batches = f.Applies, f.Batches
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Changed(ports[7].Name)); err != nil {
		t.Fatal(err)
	}
	if f.Applies != applies || f.Batches != batches+1 || !strings.Contains(string(f.LastScript), "numgen random mod 3 offset ") {
		t.Errorf("scale-up: %d scripts, %d batches:\n%s", f.Applies-applies, f.Batches-batches, f.LastScript)
	}
	// A new service needs chains: that goes through nft.
	ports = append(ports, proxytest.Port("ns", "new", "10.96.1.1", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.7.7")))
	applies = f.Applies
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Changed(ports[len(ports)-1].Name)); err != nil {
		t.Fatal(err)
	}
	if f.Applies != applies+1 {
		t.Errorf("new service did not go through nft:\n%s", f.LastScript)
	}
	// Nothing changed: no transaction at all.
	n := f.Applies
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, ports...), proxytest.Changed(ports[3].Name)); err != nil {
		t.Fatal(err)
	}
	if f.Applies != n {
		t.Errorf("an unchanged service caused a transaction:\n%s", f.LastScript)
	}
}

func TestEmptyAndEdgeSnapshots(t *testing.T) {
	ctx := context.Background()
	for _, fam := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		f := NewFake()
		p := New(fam, f, nil)
		empty := proxytest.Snapshot(fam)
		empty.ClusterCIDRs = nil
		if _, err := p.Sync(ctx, empty, proxytest.Full); err != nil {
			t.Fatalf("%s empty snapshot: %v\n%s", fam, err, f.LastScript)
		}
		// Nothing programmable, nothing to delete: partial sync no-op.
		if _, err := p.Sync(ctx, empty, proxytest.Changed(proxytest.PortName("x", "y", "p", proxy.TCP))); err != nil {
			t.Fatal(err)
		}
		edge := proxytest.Snapshot(fam)
		edge.NodePorts = proxy.NodePorts{} // --nodeport-addresses matched nothing
		ip := "10.96.0.1"
		if fam == proxy.IPv6 {
			ip = "fd00::1"
		}
		sp := proxytest.Port("default", "edge", ip, 65535, proxy.SCTP, proxytest.WithNodePort(30000), proxytest.WithETPLocal, proxytest.WithAffinity(24*time.Hour))
		sp.LoadBalancerSourceRanges = nil
		edge = proxytest.Snapshot(fam, sp)
		edge.NodePorts = proxy.NodePorts{}
		if _, err := p.Sync(ctx, edge, proxytest.Full); err != nil {
			t.Fatalf("%s edge snapshot: %v\n%s", fam, err, f.LastScript)
		}
		if _, err := p.Sync(ctx, proxytest.Snapshot(fam), proxytest.Changed(sp.Name)); err != nil {
			t.Fatalf("%s removing the edge service: %v\n%s", fam, err, f.LastScript)
		}
	}
	// A snapshot of the wrong family is refused, not programmed.
	if _, err := New(proxy.IPv4, NewFake(), nil).Sync(ctx, proxytest.Snapshot(proxy.IPv6), proxytest.Full); err == nil {
		t.Error("IPv4 proxier accepted an IPv6 snapshot")
	}
}

func TestFakeRejectsWhatTheKernelRejects(t *testing.T) {
	ctx := context.Background()
	base := "add table ip t\nadd chain ip t base { type nat hook prerouting priority dstnat ; policy accept ; }\n" +
		"add chain ip t fbase { type filter hook input priority filter ; policy accept ; }\n" +
		"add chain ip t a\nadd map ip t m { type ipv4_addr . inet_proto . inet_service : verdict ; }\n" +
		"add rule ip t base ip daddr . meta l4proto . th dport vmap @m\nadd element ip t m { 10.0.0.1 . tcp . 80 : goto a }\n"
	for _, tc := range []struct{ name, in, want string }{
		{"jump to a missing chain", "add rule ip t a jump nope\n", msgNoEnt},
		{"jump to a chain added later", "add rule ip t a jump b\nadd chain ip t b\n", msgNoEnt},
		{"element naming a missing chain", "add element ip t m { 10.0.0.2 . tcp . 80 : goto nope }\n", msgNoEnt},
		{"element mapped to another verdict", "add element ip t m { 10.0.0.1 . tcp . 80 : drop }\n", msgExist},
		{"deleting a missing element", "delete element ip t m { 10.0.0.9 . tcp . 80 }\n", msgNoEnt},
		{"deleting a referenced chain", "delete chain ip t a\n", msgBusy},
		{"flushing a missing chain", "flush chain ip t nope\n", msgNoEnt},
		{"reference to a missing set", "add rule ip t a ip saddr @nope accept\n", msgNoEnt},
		{"key of the wrong family", "add element ip t m { fd00::1 . tcp . 80 : drop }\n", msgInvalArg},
		{"jump loop", "add chain ip t b\nadd rule ip t a jump b\nadd rule ip t b jump a\n", msgTooMany},
		{"DNAT reachable from a filter chain", "add rule ip t a meta l4proto tcp dnat to 10.0.0.2:80\nadd rule ip t fbase jump a\n", msgNotSupp},
		{"masquerade reachable from prerouting", "add rule ip t a masquerade fully-random\n", msgNotSupp},
		{"deleting a missing table", "delete table ip nope\n", msgNoEnt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake()
			if err := f.Apply(ctx, []byte(base)); err != nil {
				t.Fatal(err)
			}
			before := f.Dump()
			err := f.Apply(ctx, []byte(tc.in))
			if err == nil || !hasMsg(err, tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if f.Dump() != before {
				t.Error("a failed transaction changed state")
			}
		})
	}
	t.Run("flush and delete in one transaction after the references are gone", func(t *testing.T) {
		f := NewFake()
		if err := f.Apply(ctx, []byte(base)); err != nil {
			t.Fatal(err)
		}
		if err := f.Apply(ctx, []byte("delete element ip t m { 10.0.0.1 . tcp . 80 }\nflush chain ip t a\ndelete chain ip t a\n")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSyncFailureForcesFullResync(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	p := New(proxy.IPv4, f, nil)
	web := proxytest.Port("default", "web", "10.96.0.10", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.2"))
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	// Someone flushes our map behind our back: the partial delete fails.
	if err := f.Apply(ctx, []byte("flush map ip nodenet-proxy service-ips\n")); err != nil {
		t.Fatal(err)
	}
	web2 := proxytest.Port("default", "web", "10.96.0.10", 80, proxy.TCP)
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web2), proxytest.Changed(web2.Name)); err == nil {
		t.Fatal("partial sync on a flushed map succeeded")
	}
	web3 := proxytest.Port("default", "web", "10.96.0.10", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.5"))
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web3), proxytest.Changed()); err != nil {
		t.Fatalf("recovery sync: %v\n%s", err, f.LastScript)
	}
	if got := proxytest.Summarize(trace(t, f, "ip", proxytest.Packet{Src: v4("10.244.0.1"), Dst: v4("10.96.0.10"), Proto: "tcp", Dport: 80})); got != "[ACCEPT dnat=10.244.1.5:8080]" {
		t.Errorf("after recovery: %s", got)
	}
}

// lineDiff shows lines only in a (-) or only in b (+).
func lineDiff(a, b string) string {
	count := map[string]int{}
	for _, l := range strings.Split(b, "\n") {
		count[l]++
	}
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if count[l] > 0 {
			count[l]--
			continue
		}
		out = append(out, "- "+l)
	}
	for l, n := range count {
		for range n {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// Two services sharing an endpoint share its hairpin element: it stays
// while either wants it and goes with the last one.
func TestSharedHairpinElement(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	p := New(proxy.IPv4, f, nil)
	a := proxytest.Port("ns", "a", "10.96.0.1", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.1"))
	b := proxytest.Port("ns", "b", "10.96.0.2", 81, proxy.TCP, proxytest.WithEndpoints(8081, "10.244.1.1"))
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, a, b), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	const key = "10.244.1.1 . 10.244.1.1"
	has := func() bool { _, ok := f.Table("ip", TableName).Elements(setHairpin)[key]; return ok }
	if !has() {
		t.Fatalf("hairpin element missing after full sync:\n%s", f.Dump())
	}
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, b), proxytest.Changed(a.Name)); err != nil {
		t.Fatal(err)
	}
	if !has() {
		t.Fatalf("hairpin element removed while service b still uses it:\n%s", f.Dump())
	}
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4), proxytest.Changed(b.Name)); err != nil {
		t.Fatal(err)
	}
	if has() {
		t.Fatalf("hairpin element left after both services went:\n%s", f.Dump())
	}
	// And back: a partial sync re-adds it once.
	if _, err := p.Sync(ctx, proxytest.Snapshot(proxy.IPv4, a, b), proxytest.Changed(a.Name, b.Name)); err != nil {
		t.Fatal(err)
	}
	if !has() {
		t.Fatalf("hairpin element not re-added:\n%s", f.Dump())
	}
}
