package ipvs

import (
	"context"
	"net/netip"
	"reflect"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

func TestFakeOwnership(t *testing.T) {
	ownership(t, NewFake(), NewFakeHost(), netip.MustParseAddr("192.168.0.10"))
}

// TestKernelOwnership holds the kernel to the same steps (inside the VM).
func TestKernelOwnership(t *testing.T) {
	requireGuest(t)
	node, pod := nettest.New(t), nettest.New(t)
	nettest.Link(t, node, "p1", "10.244.1.1/24", pod, "eth0", "10.244.1.2/24")
	h, err := Open(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ownership(t, h, NetHost{Netns: node.Path()}, netip.MustParseAddr("10.244.1.1"))
}

// ownership: another IPVS user's virtual servers (a keepalived/LVS on the
// node's address, one in the NodePort range, one elsewhere) survive
// nodenet's full syncs, a restarted proxy's that finds its Service gone,
// and a Cleanup from another process; nodenet's own (ClusterIP, the
// NodePort on the same address) go.
func ownership(t *testing.T, h Handle, host Host, nodeAddr netip.Addr) {
	t.Helper()
	ctx := context.Background()
	foreign := []Service{
		{Addr: nodeAddr, Port: 443, Protocol: proxy.TCP, Scheduler: "wlc"},
		{Addr: nodeAddr, Port: 30081, Protocol: proxy.UDP, Scheduler: "rr"},
		{Addr: netip.MustParseAddr("172.16.0.1"), Port: 80, Protocol: proxy.TCP, Scheduler: "rr"},
	}
	dest := Destination{Addr: netip.MustParseAddr("10.244.1.2"), Port: 8443, Weight: 1}
	for _, s := range foreign {
		if err := h.AddService(s); err != nil {
			t.Fatal(err)
		}
		if err := h.AddDestination(s.Key(), dest); err != nil {
			t.Fatal(err)
		}
	}
	SortServices(foreign)
	nodePort := ServiceKey{Addr: nodeAddr, Port: 30080, Protocol: proxy.TCP}
	services := func(when string) map[ServiceKey]bool {
		t.Helper()
		got, err := h.Services()
		if err != nil {
			t.Fatal(err)
		}
		keys := map[ServiceKey]bool{}
		for _, s := range got {
			keys[s.Key()] = true
		}
		for _, f := range foreign {
			if !keys[f.Key()] {
				t.Fatalf("%s: the foreign virtual server %s is gone", when, f)
			}
			if ds, err := h.Destinations(f.Key()); err != nil || len(ds) != 1 {
				t.Fatalf("%s: the foreign virtual server %s has destinations %+v %v", when, f, ds, err)
			}
		}
		return keys
	}
	only := func(when string) {
		t.Helper()
		got, _ := h.Services()
		SortServices(got)
		if !reflect.DeepEqual(got, foreign) {
			t.Fatalf("%s: want only the foreign virtual servers\n got %+v\nwant %+v", when, got, foreign)
		}
	}
	snap := proxytest.Snapshot(proxy.IPv4, webPort(proxytest.WithEndpoints(8080, "10.244.1.2"), proxytest.WithNodePort(30080)))
	p := New(proxy.IPv4, h, host, Config{}, testapi.Logger())
	syncOK(t, p, snap, proxytest.Full)
	if s := services("full sync"); !s[webKey] || !s[nodePort] {
		t.Fatalf("full sync: want the ClusterIP and the NodePort on %s, got %v", nodeAddr, s)
	}
	syncOK(t, p, snap, proxytest.Full)
	services("second full sync")

	// A restarted proxy whose Service was deleted meanwhile: it knows the
	// NodePort was nodenet's from the record in the table.
	restarted := New(proxy.IPv4, h, host, Config{}, testapi.Logger())
	syncOK(t, restarted, proxytest.Snapshot(proxy.IPv4), proxytest.Full)
	only("restarted full sync without the Service")

	syncOK(t, restarted, snap, proxytest.Full)
	services("the Service back")
	if err := New(proxy.IPv4, h, host, Config{}, testapi.Logger()).Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	only("Cleanup from another process")
	for _, s := range foreign {
		if err := h.DeleteService(s.Key()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestParseNodePortSet reads `nft -j list set` output, with protocols as
// names and (no /etc/protocols, as in the VM) as numbers, and refuses
// elements of another shape.
func TestParseNodePortSet(t *testing.T) {
	js := `{"nftables": [{"metainfo": {"json_schema_version": 1}}, {"set": {"family": "ip", "name": "nodeports", "table": "nodenet-ipvs",
		"type": ["ipv4_addr", "inet_proto", "inet_service"], "handle": 7,
		"elem": [{"concat": ["192.168.0.10", "tcp", 30080]}, {"concat": ["192.168.0.10", 17, 30053]}, {"concat": ["10.0.0.1", "sctp", 30099]}]}}]}`
	got, err := parseNodePortSet([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("192.168.0.10")
	want := []ServiceKey{{Addr: a, Port: 30080, Protocol: proxy.TCP}, {Addr: a, Port: 30053, Protocol: proxy.UDP},
		{Addr: netip.MustParseAddr("10.0.0.1"), Port: 30099, Protocol: proxy.SCTP}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got, err := parseNodePortSet([]byte(`{"nftables": [{"set": {"name": "nodeports"}}]}`)); err != nil || len(got) != 0 {
		t.Fatalf("empty set: %v %v", got, err)
	}
	for _, bad := range []string{
		`{"nftables": [{"set": {"elem": [{"concat": ["192.168.0.10", "tcp"]}]}}]}`,
		`{"nftables": [{"set": {"elem": [{"concat": ["nope", "tcp", 1]}]}}]}`,
		`{"nftables": [{"set": {"elem": [{"concat": ["192.168.0.10", "icmp", 1]}]}}]}`,
		`{"nftables": [{"set": {"elem": [{"concat": ["192.168.0.10", 1, 1]}]}}]}`,
		`not json`,
	} {
		if got, err := parseNodePortSet([]byte(bad)); err == nil {
			t.Errorf("%s: accepted as %+v", bad, got)
		}
	}
}
