package ebpf

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	pt "github.com/nodenet/nodenet/proxy/proxytest"
)

// TestTCMapsMatchSocketLB: the tc object opens the socket programs' pinned
// services and backends maps, so both objects must declare them alike
// (the loader refuses a pinned map whose spec differs; both include
// bpf/lbmaps.h, this holds the compiled result), and the tc path's
// own keys must match the Go types the sync writes.
func TestTCMapsMatchSocketLB(t *testing.T) {
	sock, err := loadSocklb()
	if err != nil {
		t.Fatal(err)
	}
	tc, err := loadTcnat()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{socklbMapServices, socklbMapBackends, socklbMapLocalAddrs} {
		a, b := sock.Maps[name], tc.Maps[name]
		if a.Type != b.Type || a.KeySize != b.KeySize || a.ValueSize != b.ValueSize || a.MaxEntries != b.MaxEntries ||
			a.Flags != b.Flags || a.Pinning != b.Pinning {
			t.Errorf("map %s: socklb %+v, tcnat %+v", name, a, b)
		}
	}
	for name, kv := range map[string][2]any{
		tcnatMapServices:   {svcKey{}, svcValue{}},
		tcnatMapBackends:   {backendKey{}, addrPort{}},
		tcnatMapSrcRanges:  {tcnatSrcKey{}, uint8(0)},
		tcnatMapSnatAddrs:  {uint32(0), addrPort{}},
		tcnatMapLocalAddrs: {localAddr{}, uint8(0)},
	} {
		m := tc.Maps[name]
		if err := sameLayout(m.Key, reflect.TypeOf(kv[0])); err != nil {
			t.Errorf("map %s key: %v", name, err)
		}
		if err := sameLayout(m.Value, reflect.TypeOf(kv[1])); err != nil {
			t.Errorf("map %s value: %v", name, err)
		}
	}
}

// TestExternalEntryFlags: eTP Local marks every entry point but the
// ClusterIP "keep the source"; source ranges restrict LB IPs only, to the
// family's prefixes.
func TestExternalEntryFlags(t *testing.T) {
	sp := pt.Port("ns", "lb", "10.96.0.30", 80, proxy.TCP, pt.WithNodePort(30080), pt.WithExternalIPs("192.0.2.7"),
		pt.WithLB("198.51.100.1", "203.0.113.0/24", "2001:db8::/32", "10.1.2.3/8"), pt.WithETPLocal,
		pt.WithLocalEndpoints(8080, "10.244.1.5"))
	snap := pt.Snapshot(proxy.IPv4, sp)
	snap.Node.IPs = []netip.Addr{netip.MustParseAddr("192.168.1.10")}
	ranges := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("10.0.0.0/8")}
	got := map[string]entry{}
	st := newState(proxy.IPv4, nil, nil, testapi.Logger())
	for _, e := range entries(snap, sp) {
		got[st.keyString(e.key)] = e
	}
	for key, want := range map[string]struct {
		flags  uint32
		ranges []netip.Prefix
	}{
		"10.96.0.30:80/tcp":         {0, nil},
		"192.0.2.7:80/tcp":          {flagKeepSource | flagInside, nil},
		"192.0.2.7:80/tcp (inside)": {flagKeepSource, nil},
		"*:30080/tcp":               {flagKeepSource | flagInside, nil},
		"*:30080/tcp (inside)":      {flagKeepSource, nil},
		"198.51.100.1:80/tcp":       {flagKeepSource | flagSrcRanges | flagInside, ranges},
		// Pods are held to loadBalancerSourceRanges as well.
		"198.51.100.1:80/tcp (inside)": {flagKeepSource | flagSrcRanges, ranges},
	} {
		e, ok := got[key]
		if !ok {
			t.Errorf("no entry %s in %v", key, got)
			continue
		}
		if e.flags != want.flags || !slices.Equal(e.ranges, want.ranges) {
			t.Errorf("%s: flags %b ranges %v, want %b %v", key, e.flags, e.ranges, want.flags, want.ranges)
		}
	}
}

// TestSourceRangesFollowTheEntryPoint: src_ranges holds exactly the
// allowed prefixes of the live entry points, through changes, removal and
// a restart's full sync (which also drops strays).
func TestSourceRangesFollowTheEntryPoint(t *testing.T) {
	tb := fakeTables(t, 1024)
	src := newFakeTable[tcnatSrcKey, uint8](1024)
	newS := func() *state {
		s := newState(proxy.IPv4, tb.services, tb.backends, testapi.Logger())
		s.ranges = newRangeSet(src)
		return s
	}
	s := newS()
	port := func(ranges ...string) *proxy.ServicePort {
		return pt.Port("ns", "lb", "10.96.0.30", 80, proxy.TCP, pt.WithLB("198.51.100.1", ranges...),
			pt.WithEndpoints(8080, "10.244.1.5"))
	}
	held := func() []string {
		all, err := src.All()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for k := range all {
			p := netip.PrefixFrom(wordsAddr(k.Addr, proxy.IPv4), int(k.Prefixlen)-32).String()
			if k.Id == clusterCIDRsID {
				p = "cluster " + p
			}
			out = append(out, p)
		}
		slices.Sort(out)
		return out
	}
	step := func(name string, snap *proxy.Snapshot, cs proxy.ChangeSet, want ...string) {
		t.Helper()
		if _, err := s.sync(snap, cs); err != nil {
			t.Fatal(err)
		}
		if got := held(); !slices.Equal(got, want) {
			t.Errorf("%s: src_ranges %v, want %v", name, got, want)
		}
	}
	// The cluster CIDRs (the tc path's test for inside sources) stay
	// through every step.
	const cluster = "cluster 10.244.0.0/16"
	lb := port("203.0.113.0/24", "192.0.2.9/32")
	step("full sync", pt.Snapshot(proxy.IPv4, lb), pt.Full, "192.0.2.9/32", "203.0.113.0/24", cluster)
	step("one range replaced", pt.Snapshot(proxy.IPv4, port("203.0.113.0/24", "192.0.2.0/28")), pt.Changed(lb.Name),
		"192.0.2.0/28", "203.0.113.0/24", cluster)
	step("ranges dropped", pt.Snapshot(proxy.IPv4, port()), pt.Changed(lb.Name), cluster)
	step("ranges back", pt.Snapshot(proxy.IPv4, lb), pt.Changed(lb.Name), "192.0.2.9/32", "203.0.113.0/24", cluster)
	if err := src.Put(srcKey(999, netip.MustParsePrefix("10.0.0.0/8")), 1); err != nil {
		t.Fatal(err)
	}
	s = newS()
	step("restart drops strays", pt.Snapshot(proxy.IPv4, lb), pt.Full, "192.0.2.9/32", "203.0.113.0/24", cluster)
	step("service deleted", pt.Snapshot(proxy.IPv4), pt.Changed(lb.Name), cluster)
}
