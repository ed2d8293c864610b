package iptables

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) { os.Exit(nettest.CheckNoLeaks(m)) }

// goldenServices covers every feature once.
func goldenServices(fam proxy.Family) []*proxy.ServicePort {
	a := func(v4, v6 string) string {
		if fam == proxy.IPv6 {
			return v6
		}
		return v4
	}
	return []*proxy.ServicePort{
		mkPort("default", "web", a("10.96.0.10", "fd00::10"), 80, proxy.TCP, withEndpoints(8080, a("10.244.1.2", "fd10::1:2"), a("10.244.2.2", "fd10::2:2"))),
		mkPort("default", "dns", a("10.96.0.53", "fd00::53"), 53, proxy.UDP),
		mkPort("default", "np", a("10.96.0.20", "fd00::20"), 80, proxy.TCP, withNodePort(30080), withEndpoints(8080, a("10.244.1.3", "fd10::1:3"))),
		mkPort("default", "lb", a("10.96.0.30", "fd00::30"), 443, proxy.TCP, withNodePort(30443), withETPLocal,
			withLB(a("192.0.2.10", "2001:db8::10"), a("203.0.113.0/24", "2001:db8:1::/48")),
			withLocalEndpoints(8443, a("10.244.0.5", "fd10::5")), withEndpoints(8443, a("10.244.3.5", "fd10::3:5"))),
		mkPort("default", "ext", a("10.96.0.40", "fd00::40"), 8080, proxy.TCP, withExternalIPs(a("198.51.100.7", "2001:db8::7"))),
		mkPort("default", "sticky", a("10.96.0.50", "fd00::50"), 80, proxy.TCP, withAffinity(3*time.Hour),
			withEndpoints(80, a("10.244.1.9", "fd10::1:9"), a("10.244.2.9", "fd10::2:9"), a("10.244.3.9", "fd10::3:9"))),
		mkPort("default", "itp", a("10.96.0.60", "fd00::60"), 80, proxy.TCP, withITPLocal,
			withLocalEndpoints(80, a("10.244.0.6", "fd10::6")), withEndpoints(80, a("10.244.4.6", "fd10::4:6"))),
		mkPort("default", "sctp", a("10.96.0.70", "fd00::70"), 9999, proxy.SCTP, withEndpoints(9999, a("10.244.1.7", "fd10::1:7"))),
		mkPort("default", "local-none", a("10.96.0.80", "fd00::80"), 80, proxy.UDP, withNodePort(30081), withETPLocal,
			withEndpoints(80, a("10.244.5.8", "fd10::5:8"))),
	}
}

func TestGoldenRules(t *testing.T) {
	for _, fam := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		t.Run(fam.String(), func(t *testing.T) {
			f := NewFake()
			p := New(fam, f, nil)
			res, err := p.Sync(context.Background(), mkSnap(fam, goldenServices(fam)...), full)
			if err != nil {
				t.Fatal(err)
			}
			if res.Written == 0 || res.Total < res.Written {
				t.Errorf("result %+v", res)
			}
			got := f.Dump()
			path := filepath.Join("testdata", "golden-"+strings.ToLower(fam.String())+".txt")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("rules differ from %s (run with -update to accept):\n%s", path, got)
			}
		})
	}
}

func v4(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestTracer(t *testing.T) {
	f := NewFake()
	p := New(proxy.IPv4, f, nil)
	if _, err := p.Sync(context.Background(), mkSnap(proxy.IPv4, goldenServices(proxy.IPv4)...), full); err != nil {
		t.Fatal(err)
	}
	node := []netip.Addr{v4("192.168.0.2"), v4("127.0.0.1")}
	pod := v4("10.244.0.9")     // a pod on this node
	outside := v4("172.16.0.1") // a client outside the cluster
	for _, tc := range []struct {
		name string
		p    packet
		want string
	}{
		{"cluster IP from a pod: both endpoints, no masquerade",
			packet{src: pod, dst: v4("10.96.0.10"), proto: "tcp", dport: 80},
			"[ACCEPT dnat=10.244.1.2:8080 ACCEPT dnat=10.244.2.2:8080]"},
		{"cluster IP from outside the cluster CIDR: masqueraded",
			packet{src: outside, dst: v4("10.96.0.10"), proto: "tcp", dport: 80},
			"[ACCEPT dnat=10.244.1.2:8080 masq ACCEPT dnat=10.244.2.2:8080 masq]"},
		{"cluster IP from the node itself",
			packet{src: v4("192.168.0.2"), dst: v4("10.96.0.10"), proto: "tcp", dport: 80, local: true},
			"[ACCEPT dnat=10.244.1.2:8080 masq ACCEPT dnat=10.244.2.2:8080 masq]"},
		{"wrong port: untouched",
			packet{src: pod, dst: v4("10.96.0.10"), proto: "tcp", dport: 81},
			"[ACCEPT]"},
		{"no endpoints: rejected",
			packet{src: pod, dst: v4("10.96.0.53"), proto: "udp", dport: 53},
			"[REJECT]"},
		{"hairpin: endpoint reaching itself is masqueraded",
			packet{src: v4("10.244.1.3"), dst: v4("10.96.0.20"), proto: "tcp", dport: 80},
			"[ACCEPT dnat=10.244.1.3:8080 masq]"},
		{"NodePort (eTP Cluster) from outside: masqueraded",
			packet{src: outside, dst: v4("192.168.0.2"), proto: "tcp", dport: 30080, addrs: node},
			"[ACCEPT dnat=10.244.1.3:8080 masq]"},
		{"NodePort eTP Local from outside: local endpoint only, source kept",
			packet{src: outside, dst: v4("192.168.0.2"), proto: "tcp", dport: 30443, addrs: node},
			"[ACCEPT dnat=10.244.0.5:8443]"},
		{"LB IP from an allowed range: local endpoint, source kept",
			packet{src: v4("203.0.113.9"), dst: v4("192.0.2.10"), proto: "tcp", dport: 443},
			"[ACCEPT dnat=10.244.0.5:8443]"},
		{"LB IP from outside the source ranges: dropped",
			packet{src: outside, dst: v4("192.0.2.10"), proto: "tcp", dport: 443},
			"[DROP]"},
		{"LB IP from a pod outside the source ranges: dropped",
			packet{src: pod, dst: v4("192.0.2.10"), proto: "tcp", dport: 443},
			"[DROP]"},
		{"cluster IP of the eTP Local service: every endpoint",
			packet{src: pod, dst: v4("10.96.0.30"), proto: "tcp", dport: 443},
			"[ACCEPT dnat=10.244.0.5:8443 ACCEPT dnat=10.244.3.5:8443]"},
		{"external IP without endpoints: rejected",
			packet{src: outside, dst: v4("198.51.100.7"), proto: "tcp", dport: 8080},
			"[REJECT]"},
		{"iTP Local: only the local endpoint",
			packet{src: pod, dst: v4("10.96.0.60"), proto: "tcp", dport: 80},
			"[ACCEPT dnat=10.244.0.6:80]"},
		{"SCTP",
			packet{src: pod, dst: v4("10.96.0.70"), proto: "sctp", dport: 9999},
			"[ACCEPT dnat=10.244.1.7:9999]"},
		{"eTP Local NodePort without local endpoints: rejected",
			packet{src: outside, dst: v4("192.168.0.2"), proto: "udp", dport: 30081, addrs: node},
			"[REJECT]"},
		{"eTP Local NodePort without local endpoints, from the node: cluster endpoints",
			packet{src: v4("192.168.0.2"), dst: v4("192.168.0.2"), proto: "udp", dport: 30081, addrs: node, local: true},
			"[ACCEPT dnat=10.244.5.8:80 masq]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(trace(t, f, tc.p)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}

	t.Run("affinity sticks once recorded", func(t *testing.T) {
		pk := packet{src: pod, dst: v4("10.96.0.50"), proto: "tcp", dport: 80}
		outs := trace(t, f, pk)
		if got := summarize(outs); got != "[ACCEPT dnat=10.244.1.9:80 ACCEPT dnat=10.244.2.9:80 ACCEPT dnat=10.244.3.9:80]" {
			t.Fatalf("first packet: %s", got)
		}
		var chosen outcome
		for _, o := range outs {
			if o.DNAT == "10.244.2.9:80" {
				chosen = o
			}
		}
		if chosen.Recent == "" {
			t.Fatal("DNAT did not record the client in a recent list")
		}
		pk.recent = map[string][]netip.Addr{chosen.Recent: {pod}}
		if got := summarize(trace(t, f, pk)); got != "[ACCEPT dnat=10.244.2.9:80]" {
			t.Errorf("with affinity recorded: %s", got)
		}
	})
}

// TestPartialEqualsFull drives random changes through partial syncs and
// checks after each that the tables equal a from-scratch full sync.
func TestPartialEqualsFull(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	f := NewFake()
	p := New(proxy.IPv4, f, nil)
	ports := map[proxy.ServicePortName]*proxy.ServicePort{}
	build := func() *proxy.Snapshot {
		var list []*proxy.ServicePort
		for _, sp := range ports {
			cp := *sp
			list = append(list, &cp)
		}
		return mkSnap(proxy.IPv4, list...)
	}
	random := func(i int) *proxy.ServicePort {
		var opts []svcOpt
		var eps []string
		for j := range rng.IntN(4) {
			eps = append(eps, fmt.Sprintf("10.244.%d.%d", rng.IntN(3), j+1))
		}
		opts = append(opts, withEndpoints(8080, eps...))
		if rng.IntN(2) == 0 {
			opts = append(opts, withLocalEndpoints(8080, fmt.Sprintf("10.244.0.%d", 100+rng.IntN(2))))
		}
		if rng.IntN(3) == 0 {
			opts = append(opts, withNodePort(uint16(30000+i)))
		}
		if rng.IntN(4) == 0 {
			opts = append(opts, withETPLocal)
		}
		if rng.IntN(4) == 0 {
			opts = append(opts, withLB(fmt.Sprintf("192.0.2.%d", i%250+1), "203.0.113.0/24"))
		}
		if rng.IntN(5) == 0 {
			opts = append(opts, withAffinity(time.Minute))
		}
		if rng.IntN(5) == 0 {
			opts = append(opts, withITPLocal)
		}
		proto := []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP}[rng.IntN(3)]
		return mkPort("ns", fmt.Sprint("svc", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), 80, proto, opts...)
	}
	for i := range 20 {
		sp := random(i)
		ports[sp.Name] = sp
	}
	if _, err := p.Sync(ctx, build(), full); err != nil {
		t.Fatal(err)
	}
	for round := range 60 {
		var names []proxy.ServicePortName
		for range 1 + rng.IntN(3) {
			i := rng.IntN(25)
			sp := random(i)
			if rng.IntN(5) == 0 {
				delete(ports, sp.Name)
			} else {
				ports[sp.Name] = sp
			}
			names = append(names, sp.Name)
		}
		snap := build()
		if _, err := p.Sync(ctx, snap, changed(names...)); err != nil {
			t.Fatalf("round %d: partial sync: %v\n%s", round, err, f.LastData)
		}
		ref := NewFake()
		if _, err := New(proxy.IPv4, ref, nil).Sync(ctx, snap, full); err != nil {
			t.Fatal(err)
		}
		if got, want := sortedDump(f), sortedDump(ref); got != want {
			t.Fatalf("round %d: partial sync diverged from full sync\npartial:\n%s\nfull:\n%s", round, got, want)
		}
	}
}

// sortedDump renders a dump with each chain's rules sorted where order does
// not matter (shared chains), so partial and full syncs compare equal.
func sortedDump(f *Fake) string {
	var sb strings.Builder
	for _, table := range []string{"filter", "nat"} {
		for _, c := range f.Chains(table) {
			rules := f.Rules(table, c)
			if c == chainServices || c == chainNodePorts || c == chainFirewall {
				last := ""
				if table == "nat" && c == chainServices && len(rules) > 0 && strings.Contains(rules[len(rules)-1], "-j "+chainNodePorts) {
					last, rules = rules[len(rules)-1], rules[:len(rules)-1]
				}
				rules = sortedCopy(rules)
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

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func TestFullSyncRemovesStaleChainsAndRestoresHooks(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	web := mkPort("default", "web", "10.96.0.10", 80, proxy.TCP, withEndpoints(8080, "10.244.1.2"))
	gone := mkPort("default", "gone", "10.96.0.11", 80, proxy.TCP, withEndpoints(8080, "10.244.1.3"))
	if _, err := New(proxy.IPv4, f, nil).Sync(ctx, mkSnap(proxy.IPv4, web, gone), full); err != nil {
		t.Fatal(err)
	}
	// Another proxy's rules and someone deleting a hook.
	if err := f.Restore(ctx, []byte("*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-D OUTPUT "+hooks[1].rule+"\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	// A restarted proxy: fresh state, first sync is full.
	p := New(proxy.IPv4, f, nil)
	if _, err := p.Sync(ctx, mkSnap(proxy.IPv4, web), changed()); err != nil {
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
	res, err := p.Sync(ctx, mkSnap(proxy.IPv4, web), full)
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
	res, err = New(proxy.IPv4, f, nil).Sync(ctx, mkSnap(proxy.IPv4, web), full)
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
			f := NewFake()
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
	f := NewFake()
	p := New(proxy.IPv4, f, nil)
	web := mkPort("default", "web", "10.96.0.10", 80, proxy.TCP, withEndpoints(8080, "10.244.1.2"))
	if _, err := p.Sync(ctx, mkSnap(proxy.IPv4, web), full); err != nil {
		t.Fatal(err)
	}
	// Someone flushes our chain behind our back: the partial -D fails.
	if err := f.Restore(ctx, []byte("*nat\n:"+chainServices+" - [0:0]\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	web2 := mkPort("default", "web", "10.96.0.10", 80, proxy.TCP, withEndpoints(8080, "10.244.1.5"))
	if _, err := p.Sync(ctx, mkSnap(proxy.IPv4), changed(web2.Name)); err == nil {
		t.Fatal("partial sync on a flushed chain succeeded")
	}
	if _, err := p.Sync(ctx, mkSnap(proxy.IPv4, web2), changed()); err != nil {
		t.Fatalf("recovery sync: %v", err)
	}
	if got := summarize(trace(t, f, packet{src: v4("10.244.0.1"), dst: v4("10.96.0.10"), proto: "tcp", dport: 80})); got != "[ACCEPT dnat=10.244.1.5:8080]" {
		t.Errorf("after recovery: %s", got)
	}
}
