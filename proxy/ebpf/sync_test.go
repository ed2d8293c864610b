package ebpf

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	pt "github.com/nodenet/nodenet/proxy/proxytest"
)

func be(a string) addrPort {
	return addrPort{Addr: addrWords(mustAddr(a)), Port: swapPort(80)}
}

func TestAssignSlots(t *testing.T) {
	a, b, c, d, e := be("10.0.0.1"), be("10.0.0.2"), be("10.0.0.3"), be("10.0.0.4"), be("10.0.0.5")
	for _, tc := range []struct {
		name            string
		old, want, slot []addrPort
	}{
		{"new set in order", nil, []addrPort{a, b}, []addrPort{a, b}},
		{"unchanged", []addrPort{b, a}, []addrPort{a, b}, []addrPort{b, a}},
		{"added at the end", []addrPort{b, a}, []addrPort{a, b, c}, []addrPort{b, a, c}},
		{"newcomer takes the removed one's slot", []addrPort{a, b, c}, []addrPort{a, c, d}, []addrPort{a, d, c}},
		{"last moves into the hole", []addrPort{a, b, c, d}, []addrPort{a, c, d}, []addrPort{a, d, c}},
		{"trailing holes are dropped", []addrPort{a, b, c, d}, []addrPort{a, b}, []addrPort{a, b}},
		{"holes on both ends", []addrPort{a, b, c, d, e}, []addrPort{b, d}, []addrPort{d, b}},
		{"all gone", []addrPort{a, b}, nil, []addrPort{}},
		{"duplicate in old is a hole", []addrPort{a, a, b}, []addrPort{a, b}, []addrPort{a, b}},
	} {
		got := assignSlots(tc.old, tc.want)
		if !slices.Equal(got, tc.slot) {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}

// tables are the two maps a sync writes.
type tables struct {
	services table[svcKey, svcValue]
	backends table[backendKey, addrPort]
}

// newTables builds empty maps; max bounds the services map (the kernel
// answers E2BIG beyond it).
type newTables func(t *testing.T, max int) tables

func fakeTables(t *testing.T, max int) tables {
	return tables{newFakeTable[svcKey, svcValue](max), newFakeTable[backendKey, addrPort](1 << 20)}
}

// kernelTables creates the object's own maps (unpinned, never attached)
// so the contract runs against the kernel's map semantics.
func kernelTables(t *testing.T, max int) tables {
	nettest.RequirePrivileged(t)
	spec, err := loadSocklb()
	if err != nil {
		t.Fatal(err)
	}
	open := func(name string, max uint32) *ebpf.Map {
		ms := spec.Maps[name].Copy()
		ms.Pinning = ebpf.PinNone
		if max > 0 {
			ms.MaxEntries = max
		}
		m, err := ebpf.NewMap(ms)
		if err != nil {
			t.Fatalf("create map %s: %v", name, err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	return tables{kernelTable[svcKey, svcValue]{open(socklbMapServices, uint32(max))},
		kernelTable[backendKey, addrPort]{open(socklbMapBackends, 0)}}
}

func TestSyncContractFake(t *testing.T)   { syncContract(t, fakeTables) }
func TestSyncContractKernel(t *testing.T) { syncContract(t, kernelTables) }

// syncContract drives the map-building logic with proxytest's snapshot
// builders and checks what the maps hold after each step.
func syncContract(t *testing.T, newT newTables) {
	web := pt.Port("ns", "web", "10.96.0.10", 80, proxy.TCP, pt.WithEndpoints(8080, "10.244.1.2", "10.244.2.2"))
	dns := pt.Port("ns", "dns", "10.96.0.53", 53, proxy.UDP, pt.WithEndpoints(53, "10.244.1.3"))
	empty := pt.Port("ns", "empty", "10.96.0.99", 80, proxy.TCP)
	sticky := pt.Port("ns", "sticky", "10.96.0.20", 80, proxy.TCP, pt.WithAffinity(3*time.Hour), pt.WithEndpoints(8080, "10.244.2.9"))
	ext := pt.Port("ns", "ext", "10.96.0.30", 80, proxy.TCP, pt.WithNodePort(30080), pt.WithExternalIPs("192.0.2.7"),
		pt.WithLB("198.51.100.1"), pt.WithETPLocal,
		pt.WithEndpoints(8080, "10.244.2.5"), pt.WithLocalEndpoints(8080, "10.244.1.5"))
	snap := pt.Snapshot(proxy.IPv4, web, dns, empty, sticky, ext)
	snap.Node.IPs = []netip.Addr{netip.MustParseAddr("192.168.1.10")}

	tb := newT(t, 1024)
	s := newState(proxy.IPv4, tb.services, tb.backends, testapi.Logger())
	check := func(step string, wantWritten int, want string) {
		t.Helper()
		got, err := dump(proxy.IPv4, tb.services, tb.backends)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: maps hold\n%s\nwant\n%s", step, got, want)
		}
		if wantWritten >= 0 && s.written != wantWritten {
			t.Errorf("%s: %d updates, want %d", step, s.written, wantWritten)
		}
	}
	sync := func(snap *proxy.Snapshot, cs proxy.ChangeSet) proxy.SyncResult {
		t.Helper()
		res, err := s.sync(snap, cs)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := sync(snap, pt.Full)
	all := `tcp *:30080 (inside) -> 10.244.2.5:8080 10.244.1.5:8080
tcp *:30080 -> 10.244.1.5:8080
tcp 10.96.0.10:80 -> 10.244.1.2:8080 10.244.2.2:8080
tcp 10.96.0.20:80 affinity=3h0m0s -> 10.244.2.9:8080
tcp 10.96.0.30:80 -> 10.244.2.5:8080 10.244.1.5:8080
tcp 10.96.0.99:80 -> refused
tcp 192.0.2.7:80 (inside) -> 10.244.2.5:8080 10.244.1.5:8080
tcp 192.0.2.7:80 -> 10.244.1.5:8080
tcp 198.51.100.1:80 (inside) -> 10.244.2.5:8080 10.244.1.5:8080
tcp 198.51.100.1:80 -> 10.244.1.5:8080
udp 10.96.0.53:53 -> 10.244.1.3:53`
	// eTP Local's three external entry points each have an inside entry
	// with both endpoints. The NodePort (NodePorts.All) is one wildcard
	// entry, whatever the node's addresses.
	check("full sync", 11+15, all)
	if res.Total != 11+15 {
		t.Errorf("total %d, want 26", res.Total)
	}

	// One endpoint goes: the count drops, its slot is deleted, nothing
	// else is touched.
	web2 := pt.Port("ns", "web", "10.96.0.10", 80, proxy.TCP, pt.WithEndpoints(8080, "10.244.2.2"))
	snap2 := pt.Snapshot(proxy.IPv4, web2, dns, empty, sticky, ext)
	snap2.Node.IPs = snap.Node.IPs
	sync(snap2, pt.Changed(web.Name))
	check("endpoint removed", 3, `tcp *:30080 (inside) -> 10.244.2.5:8080 10.244.1.5:8080
tcp *:30080 -> 10.244.1.5:8080
tcp 10.96.0.10:80 -> 10.244.2.2:8080
tcp 10.96.0.20:80 affinity=3h0m0s -> 10.244.2.9:8080
tcp 10.96.0.30:80 -> 10.244.2.5:8080 10.244.1.5:8080
tcp 10.96.0.99:80 -> refused
tcp 192.0.2.7:80 (inside) -> 10.244.2.5:8080 10.244.1.5:8080
tcp 192.0.2.7:80 -> 10.244.1.5:8080
tcp 198.51.100.1:80 (inside) -> 10.244.2.5:8080 10.244.1.5:8080
tcp 198.51.100.1:80 -> 10.244.1.5:8080
udp 10.96.0.53:53 -> 10.244.1.3:53`)

	// A deleted service takes every entry point and backend with it.
	snap3 := pt.Snapshot(proxy.IPv4, web2, dns, empty, sticky)
	sync(snap3, pt.Changed(ext.Name))
	check("service deleted", 7+11, `tcp 10.96.0.10:80 -> 10.244.2.2:8080
tcp 10.96.0.20:80 affinity=3h0m0s -> 10.244.2.9:8080
tcp 10.96.0.99:80 -> refused
udp 10.96.0.53:53 -> 10.244.1.3:53`)

	// A restarted proxy (a new state over the same maps) converges with
	// a full sync that writes nothing when nothing changed...
	s = newState(proxy.IPv4, tb.services, tb.backends, testapi.Logger())
	sync(snap3, pt.Full)
	check("full sync after restart", 0, `tcp 10.96.0.10:80 -> 10.244.2.2:8080
tcp 10.96.0.20:80 affinity=3h0m0s -> 10.244.2.9:8080
tcp 10.96.0.99:80 -> refused
udp 10.96.0.53:53 -> 10.244.1.3:53`)
	// ...and removes what nobody wants, stray backends included.
	if err := tb.backends.Put(backendKey{Id: 999, Slot: 0}, be("10.9.9.9")); err != nil {
		t.Fatal(err)
	}
	sync(pt.Snapshot(proxy.IPv4, dns), pt.Full)
	check("full sync drops the rest", -1, `udp 10.96.0.53:53 -> 10.244.1.3:53`)
	if bes, _ := tb.backends.All(); len(bes) != 1 {
		t.Errorf("backends left: %v", bes)
	}
}

// TestInsideEntryFollowsThePolicy: an eTP=Local entry point gets an inside
// entry with the cluster-wide endpoints (flagged on the ordinary one, which
// keeps the local endpoints), and switching the policy back to Cluster
// removes it and the flag; internalTrafficPolicy Local needs none.
func TestInsideEntryFollowsThePolicy(t *testing.T) {
	tb := fakeTables(t, 1024)
	s := newState(proxy.IPv4, tb.services, tb.backends, testapi.Logger())
	port := func(opts ...pt.PortOpt) *proxy.ServicePort {
		return pt.Port("ns", "lb", "10.96.0.30", 80, proxy.TCP, append([]pt.PortOpt{pt.WithLB("198.51.100.1"),
			pt.WithEndpoints(8080, "10.244.2.5"), pt.WithLocalEndpoints(8080, "10.244.1.5")}, opts...)...)
	}
	lb := netip.MustParseAddr("198.51.100.1")
	key := svcKey{Addr: addrWords(lb), Port: swapPort(80), Proto: protoNumbers[proxy.TCP]}
	inKey := key
	inKey.Scope = scopeInside
	step := func(name string, sp *proxy.ServicePort, cs proxy.ChangeSet, wantFlags uint32, want string) {
		t.Helper()
		if _, err := s.sync(pt.Snapshot(proxy.IPv4, sp), cs); err != nil {
			t.Fatal(err)
		}
		got, err := dump(proxy.IPv4, tb.services, tb.backends)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: maps hold\n%s\nwant\n%s", name, got, want)
		}
		svcs, err := tb.services.All()
		if err != nil {
			t.Fatal(err)
		}
		if v := svcs[key]; v.Flags != wantFlags {
			t.Errorf("%s: LB entry flags %b, want %b", name, v.Flags, wantFlags)
		}
		if _, ok := svcs[inKey]; ok != (wantFlags&flagInside != 0) {
			t.Errorf("%s: inside entry present %v, want it only with flagInside", name, ok)
		}
	}
	local := port(pt.WithETPLocal)
	step("eTP Local", local, pt.Full, flagKeepSource|flagInside, `tcp 10.96.0.30:80 -> 10.244.2.5:8080 10.244.1.5:8080
tcp 198.51.100.1:80 (inside) -> 10.244.2.5:8080 10.244.1.5:8080
tcp 198.51.100.1:80 -> 10.244.1.5:8080`)
	// The local endpoint keeps its slot (affinity remembers slots).
	step("back to Cluster", port(), pt.Changed(local.Name), 0, `tcp 10.96.0.30:80 -> 10.244.2.5:8080 10.244.1.5:8080
tcp 198.51.100.1:80 -> 10.244.1.5:8080 10.244.2.5:8080`)
	if n := len(s.vips); n != 2 {
		t.Errorf("back to Cluster: %d entry points remembered, want 2", n)
	}
	step("eTP Local again", local, pt.Changed(local.Name), flagKeepSource|flagInside, `tcp 10.96.0.30:80 -> 10.244.2.5:8080 10.244.1.5:8080
tcp 198.51.100.1:80 (inside) -> 10.244.2.5:8080 10.244.1.5:8080
tcp 198.51.100.1:80 -> 10.244.1.5:8080`)
	step("iTP Local too", port(pt.WithETPLocal, pt.WithITPLocal), pt.Changed(local.Name), flagKeepSource,
		`tcp 10.96.0.30:80 -> 10.244.1.5:8080
tcp 198.51.100.1:80 -> 10.244.1.5:8080`)
	step("full sync back to Cluster", port(), pt.Full, 0, `tcp 10.96.0.30:80 -> 10.244.1.5:8080 10.244.2.5:8080
tcp 198.51.100.1:80 -> 10.244.1.5:8080 10.244.2.5:8080`)
}

// TestMapFullSkipsTheEntry: a services map with room for two entries takes
// two services; the third is skipped with a log line, the sync succeeds,
// and the others are programmed.
func TestMapFullSkipsTheEntryFake(t *testing.T)   { mapFullSkipsTheEntry(t, fakeTables) }
func TestMapFullSkipsTheEntryKernel(t *testing.T) { mapFullSkipsTheEntry(t, kernelTables) }

func mapFullSkipsTheEntry(t *testing.T, newT newTables) {
	tb := newT(t, 2)
	s := newState(proxy.IPv4, tb.services, tb.backends, testapi.Logger())
	snap := pt.Snapshot(proxy.IPv4,
		pt.Port("ns", "a", "10.96.0.1", 80, proxy.TCP, pt.WithEndpoints(80, "10.244.1.1")),
		pt.Port("ns", "b", "10.96.0.2", 80, proxy.TCP, pt.WithEndpoints(80, "10.244.1.2")),
		pt.Port("ns", "c", "10.96.0.3", 80, proxy.TCP, pt.WithEndpoints(80, "10.244.1.3")))
	if _, err := s.sync(snap, pt.Full); err != nil {
		t.Fatalf("sync with a full map: %v", err)
	}
	got, _ := dump(proxy.IPv4, tb.services, tb.backends)
	if want := "tcp 10.96.0.1:80 -> 10.244.1.1:80\ntcp 10.96.0.2:80 -> 10.244.1.2:80"; got != want {
		t.Errorf("maps hold\n%s\nwant\n%s", got, want)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
