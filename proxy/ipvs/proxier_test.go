package ipvs

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func newFakeProxier(f proxy.Family, cfg Config) (*Proxier, *Fake, *FakeHost) {
	h, host := NewFake(), NewFakeHost()
	return New(f, h, host, cfg, testapi.Logger()), h, host
}

func TestGoldenRules(t *testing.T) {
	proxytest.CheckGoldenRules(t, ".ipvs", *update, func(t *testing.T, fam proxy.Family) (proxy.DataPlane, func() string) {
		p, h, host := newFakeProxier(fam, Config{})
		return p, func() string { return Dump(fam, h, host) }
	})
}

func syncOK(t *testing.T, p *Proxier, snap *proxy.Snapshot, cs proxy.ChangeSet) proxy.SyncResult {
	t.Helper()
	res, err := p.Sync(context.Background(), snap, cs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var web = proxytest.PortName("default", "web", "", proxy.TCP)

func webPort(opts ...proxytest.PortOpt) *proxy.ServicePort {
	return proxytest.Port("default", "web", "10.96.0.10", 80, proxy.TCP, opts...)
}

var webKey = ServiceKey{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: proxy.TCP}

func TestFullSyncOfUnchangedStateWritesNothing(t *testing.T) {
	p, h, _ := newFakeProxier(proxy.IPv4, Config{})
	snap := proxytest.Snapshot(proxy.IPv4, proxytest.GoldenServices(proxy.IPv4)...)
	syncOK(t, p, snap, proxytest.Full)
	before := h.Calls
	if res := syncOK(t, p, snap, proxytest.Full); res.Written != 0 || h.Calls != before {
		t.Fatalf("second full sync wrote %d (%d calls)", res.Written, h.Calls-before)
	}
	// A fresh proxier over the same kernel state (a restart) converges
	// without rewriting either.
	p2 := New(proxy.IPv4, h, p.host, Config{}, testapi.Logger())
	if res := syncOK(t, p2, snap, proxytest.Full); res.Written != 0 {
		t.Fatalf("restart wrote %d", res.Written)
	}
}

func TestNoEndpointsIsRefusedNotProgrammed(t *testing.T) {
	p, h, host := newFakeProxier(proxy.IPv4, Config{})
	syncOK(t, p, proxytest.Snapshot(proxy.IPv4, webPort()), proxytest.Full)
	if s, _ := h.Services(); len(s) != 0 {
		t.Fatalf("virtual server for a service without endpoints: %v", s)
	}
	if !strings.Contains(host.Tables["ip"], "elements = { 10.96.0.10 . tcp . 80 }") {
		t.Fatalf("not in the refusal set:\n%s", host.Tables["ip"])
	}
	if v, _ := host.VIPs(proxy.IPv4); len(v) != 1 {
		t.Fatalf("VIP not bound (refusal needs it local): %v", v)
	}
}

func TestGracefulTermination(t *testing.T) {
	now := time.Unix(1000, 0)
	p, h, _ := newFakeProxier(proxy.IPv4, Config{GracefulTimeout: time.Minute, Now: func() time.Time { return now }})
	two := proxytest.Snapshot(proxy.IPv4, webPort(proxytest.WithEndpoints(8080, "10.244.1.2", "10.244.2.2")))
	syncOK(t, p, two, proxytest.Full)
	gone := netip.MustParseAddrPort("10.244.2.2:8080")
	h.SetConns(webKey, gone, 1, 0)
	one := proxytest.Snapshot(proxy.IPv4, webPort(proxytest.WithEndpoints(8080, "10.244.1.2")))
	syncOK(t, p, one, proxytest.Changed(web))
	weights := func() map[netip.AddrPort]int {
		ds, _ := h.Destinations(webKey)
		out := map[netip.AddrPort]int{}
		for _, d := range ds {
			out[d.Key()] = d.Weight
		}
		return out
	}
	if w := weights(); len(w) != 2 || w[gone] != 0 {
		t.Fatalf("removed endpoint with a connection: %v, want kept at weight 0", w)
	}
	// Its connection ends: removed at the next check.
	h.SetConns(webKey, gone, 0, 0)
	if ok, err := p.Intact(context.Background()); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if w := weights(); len(w) != 1 {
		t.Fatalf("drained endpoint kept: %v", w)
	}
	// A connection that never ends is cut at the deadline.
	syncOK(t, p, two, proxytest.Changed(web))
	h.SetConns(webKey, gone, 5, 5)
	syncOK(t, p, one, proxytest.Changed(web))
	syncOK(t, p, one, proxytest.Changed(web))
	if w := weights(); len(w) != 2 {
		t.Fatalf("endpoint with connections removed before the deadline: %v", w)
	}
	now = now.Add(time.Minute)
	syncOK(t, p, one, proxytest.Changed(web))
	if w := weights(); len(w) != 1 {
		t.Fatalf("endpoint kept past the deadline: %v", w)
	}
	// Coming back while draining restores its weight.
	syncOK(t, p, two, proxytest.Changed(web))
	h.SetConns(webKey, gone, 1, 0)
	syncOK(t, p, one, proxytest.Changed(web))
	syncOK(t, p, two, proxytest.Changed(web))
	if w := weights(); w[gone] != 1 {
		t.Fatalf("endpoint back from draining: %v", w)
	}
}

func TestSchedulerAnnotationAndAffinity(t *testing.T) {
	p, h, _ := newFakeProxier(proxy.IPv4, Config{Scheduler: "lc"})
	sp := webPort(proxytest.WithEndpoints(8080, "10.244.1.2"), proxytest.WithAffinity(1500*time.Millisecond))
	syncOK(t, p, proxytest.Snapshot(proxy.IPv4, sp), proxytest.Full)
	s, _ := h.Services()
	if len(s) != 1 || s[0].Scheduler != "lc" || s[0].Flags != FlagPersistent || s[0].Timeout != 2*time.Second {
		t.Fatalf("got %+v", s)
	}
	sp = webPort(proxytest.WithEndpoints(8080, "10.244.1.2"))
	sp.Scheduler = "mh"
	syncOK(t, p, proxytest.Snapshot(proxy.IPv4, sp), proxytest.Changed(web))
	s, _ = h.Services()
	if len(s) != 1 || s[0].Scheduler != "mh" || s[0].Flags != 0 {
		t.Fatalf("got %+v", s)
	}
	sp.Scheduler = "nope"
	if _, err := p.Sync(context.Background(), proxytest.Snapshot(proxy.IPv4, sp), proxytest.Changed(web)); err == nil {
		t.Fatal("unknown scheduler accepted")
	}
}

func TestDeletedServiceAndLeftovers(t *testing.T) {
	p, h, host := newFakeProxier(proxy.IPv4, Config{})
	snap := proxytest.Snapshot(proxy.IPv4, webPort(proxytest.WithEndpoints(8080, "10.244.1.2"), proxytest.WithNodePort(30080)))
	syncOK(t, p, snap, proxytest.Full)
	if s, _ := h.Services(); len(s) != 2 {
		t.Fatalf("want ClusterIP and NodePort virtual servers, got %v", s)
	}
	// Deleted while another proxier (a restart) did not know it: a full
	// sync removes it; a foreign virtual server stays.
	foreign := Service{Addr: netip.MustParseAddr("172.16.0.1"), Port: 80, Protocol: proxy.TCP, Scheduler: "rr"}
	if err := h.AddService(foreign); err != nil {
		t.Fatal(err)
	}
	p2 := New(proxy.IPv4, h, host, Config{}, testapi.Logger())
	syncOK(t, p2, proxytest.Snapshot(proxy.IPv4), proxytest.Full)
	if s, _ := h.Services(); len(s) != 1 || s[0].Key() != foreign.Key() {
		t.Fatalf("after full sync: %v", s)
	}
	if v, _ := host.VIPs(proxy.IPv4); len(v) != 0 {
		t.Fatalf("VIPs left: %v", v)
	}
	// Partial: a deleted service goes at once.
	syncOK(t, p2, snap, proxytest.Full)
	syncOK(t, p2, proxytest.Snapshot(proxy.IPv4), proxytest.Changed(web))
	if s, _ := h.Services(); len(s) != 1 {
		t.Fatalf("after partial sync: %v", s)
	}
	if err := p2.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, _ := host.DeviceExists(); ok || host.Tables["ip"] != "" {
		t.Fatal("cleanup left the device or the table")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{Scheduler: "mh", Timeouts: Timeouts{TCP: time.Hour}}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{{Scheduler: "bogus"}, {Timeouts: Timeouts{UDP: 1500 * time.Millisecond}}, {Timeouts: Timeouts{TCPFin: -time.Second}}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestETPLocalInsideGoesToClusterIP (kubernetes#71596): an eTP=Local LB IP
// and NodePort on a node without local endpoints get no virtual server
// (outside clients are refused), and traffic from inside the cluster is
// redirected to the ClusterIP, whose virtual server has every endpoint;
// under iTP=Local the ClusterIP has no more than the LB IP, so nothing is
// redirected.
func TestETPLocalInsideGoesToClusterIP(t *testing.T) {
	remoteOnly := func(opts ...proxytest.PortOpt) *proxy.ServicePort {
		return webPort(append([]proxytest.PortOpt{proxytest.WithETPLocal, proxytest.WithLB("192.0.2.10"), proxytest.WithNodePort(30080),
			proxytest.WithEndpoints(8080, "10.244.2.2")}, opts...)...)
	}
	snap := proxytest.Snapshot(proxy.IPv4, remoteOnly())
	p, h, host := newFakeProxier(proxy.IPv4, Config{})
	syncOK(t, p, snap, proxytest.Full)
	if s, _ := h.Services(); len(s) != 1 || s[0].Key() != webKey {
		t.Fatalf("virtual servers %v, want the ClusterIP's only", s)
	}
	table := host.Tables["ip"]
	for _, want := range []string{
		"elements = { 192.0.2.10 . tcp . 80 : 10.96.0.10 . 80, 192.168.0.10 . tcp . 30080 : 10.96.0.10 . 80 }",
		"ip saddr { 10.244.0.0/16 } meta l4proto { tcp, udp, sctp } dnat ip to ip daddr . meta l4proto . th dport map @inside",
		"elements = { 192.0.2.10 . tcp . 80, 192.168.0.10 . tcp . 30080 }", // refused from outside
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	itp := proxytest.Snapshot(proxy.IPv4, remoteOnly(proxytest.WithITPLocal))
	syncOK(t, p, itp, proxytest.Full)
	if strings.Contains(host.Tables["ip"], " : 10.96.0.10 . 80") {
		t.Errorf("iTP=Local service redirected:\n%s", host.Tables["ip"])
	}
}

// TestPartialSyncWritesOnlyChangedElements: an endpoint replaced in one
// service is one nft transaction deleting and adding that service's
// elements and nothing else, and leaves the table a full sync would
// write; a sync that changes no element runs no nft at all.
func TestPartialSyncWritesOnlyChangedElements(t *testing.T) {
	for _, fam := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		t.Run(fam.String(), func(t *testing.T) {
			p, _, host := newFakeProxier(fam, Config{})
			syncOK(t, p, proxytest.Snapshot(fam, proxytest.GoldenServices(fam)...), proxytest.Full)
			ports := proxytest.GoldenServices(fam)
			old, repl := "10.244.2.2", "10.244.2.3"
			if fam == proxy.IPv6 {
				old, repl = "fd10::2:2", "fd10::2:3"
			}
			ports[0] = proxytest.Port("default", "web", ports[0].ClusterIP.String(), 80, proxy.TCP,
				proxytest.WithEndpoints(8080, ports[0].Endpoints[0].IP.String(), repl))
			snap := proxytest.Snapshot(fam, ports...)
			before := len(host.Scripts)
			syncOK(t, p, snap, proxytest.Changed(web))
			fm := nftFamily(fam)
			want := fmt.Sprintf("delete element %s %s hairpin { %s . 8080 . %s }\nadd element %s %s hairpin { %s . 8080 . %s }\n",
				fm, TableName, old, old, fm, TableName, repl, repl)
			if got := host.Scripts[before:]; len(got) != 1 || got[0] != want {
				t.Fatalf("partial sync wrote %q, want %q", got, want)
			}
			_, _, fresh := newFakeProxier(fam, Config{})
			fp := New(fam, NewFake(), fresh, Config{}, testapi.Logger())
			syncOK(t, fp, proxytest.Snapshot(fam, ports...), proxytest.Full)
			if host.Tables[fm] != fresh.Tables[fm] {
				t.Fatalf("table after the partial sync:\n%s\nwant (full sync):\n%s", host.Tables[fm], fresh.Tables[fm])
			}
			before = len(host.Scripts)
			syncOK(t, p, snap, proxytest.Changed(web))
			if len(host.Scripts) != before {
				t.Fatalf("a sync without changes ran nft: %q", host.Scripts[before:])
			}
		})
	}
}
