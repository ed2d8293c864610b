package ebpf

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	pt "github.com/nodenet/nodenet/proxy/proxytest"
)

// TestNodePortEntries: with NodePorts.All a NodePort is one wildcard entry
// (no address, scopeWildcard), whatever the Node's addresses; with
// --nodeport-addresses it is one exact entry per address of the family and
// no wildcard, so the restriction holds.
func TestNodePortEntries(t *testing.T) {
	sp := pt.Port("ns", "np", "10.96.0.40", 80, proxy.TCP, pt.WithNodePort(30081), pt.WithEndpoints(8080, "10.244.2.5"))
	keys := func(snap *proxy.Snapshot) []string {
		st := newState(snap.Family, nil, nil, testapi.Logger())
		var out []string
		for _, e := range entries(snap, sp) {
			out = append(out, st.keyString(e.key))
			if e.key.Scope&scopeWildcard != 0 && e.key.Addr != ([4]uint32{}) {
				t.Errorf("wildcard entry with an address: %+v", e.key)
			}
		}
		slices.Sort(out)
		return out
	}
	all := pt.Snapshot(proxy.IPv4, sp)
	all.Node.IPs = []netip.Addr{netip.MustParseAddr("192.168.1.10")}
	if got, want := keys(all), []string{"*:30081/tcp", "10.96.0.40:80/tcp"}; !slices.Equal(got, want) {
		t.Errorf("NodePorts.All: %v, want %v", got, want)
	}
	only := pt.Snapshot(proxy.IPv4, sp)
	only.NodePorts = proxy.NodePorts{Addrs: []netip.Addr{netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("fd00::1")}}
	if got, want := keys(only), []string{"10.96.0.40:80/tcp", "192.168.1.10:30081/tcp"}; !slices.Equal(got, want) {
		t.Errorf("--nodeport-addresses: %v, want %v", got, want)
	}
}

// TestLocalAddrSet: the map holds the family's addresses but the
// loopback, a restart starts from the pinned entries, and a resync writes
// only what changed.
func TestLocalAddrSet(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	now := addrs("127.0.0.1", "192.168.1.10", "::1", "fd00::10", "10.0.0.5", "::ffff:10.0.0.6")
	tb := newFakeTable[localAddr, uint8](16)
	l := newLocalAddrSet(proxy.IPv4, tb, func() ([]netip.Addr, error) { return now, nil }, testapi.Logger())
	step := func(name string, wantWrites int, want ...string) {
		t.Helper()
		n, err := l.resync()
		if err != nil {
			t.Fatal(err)
		}
		if n != wantWrites {
			t.Errorf("%s: %d writes, want %d", name, n, wantWrites)
		}
		all, _ := tb.All()
		set := map[localAddr]bool{}
		for k := range all {
			set[k] = true
		}
		if got := sortedAddrs(set, proxy.IPv4); !slices.Equal(got, addrs(want...)) {
			t.Errorf("%s: map holds %v, want %v", name, got, want)
		}
		if got := l.addrs(); !slices.Equal(got, addrs(want...)) {
			t.Errorf("%s: remembered %v, want %v", name, got, want)
		}
	}
	step("first", 3, "10.0.0.5", "10.0.0.6", "192.168.1.10")
	step("unchanged", 0, "10.0.0.5", "10.0.0.6", "192.168.1.10")
	now = addrs("192.168.1.10", "10.0.0.7")
	step("one gone, one added", 3, "10.0.0.7", "192.168.1.10")
	// A new process over the same map: a stray entry goes, the rest stays.
	if err := tb.Put(localAddr{Addr: addrWords(netip.MustParseAddr("10.9.9.9"))}, 1); err != nil {
		t.Fatal(err)
	}
	l = newLocalAddrSet(proxy.IPv4, tb, func() ([]netip.Addr, error) { return now, nil }, testapi.Logger())
	step("restart", 1, "10.0.0.7", "192.168.1.10")

	v6 := newLocalAddrSet(proxy.IPv6, newFakeTable[localAddr, uint8](16), func() ([]netip.Addr, error) { return now, nil }, testapi.Logger())
	now = addrs("::1", "fd00::10", "fe80::1", "10.0.0.7")
	if _, err := v6.resync(); err != nil {
		t.Fatal(err)
	}
	if got, want := v6.addrs(), addrs("fd00::10", "fe80::1"); !slices.Equal(got, want) {
		t.Errorf("IPv6: %v, want %v", got, want)
	}
}
