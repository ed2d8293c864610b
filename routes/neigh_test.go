package routes

import (
	"net"
	"net/netip"
	"testing"
)

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func TestDiffNeigh(t *testing.T) {
	ip := netip.MustParseAddr
	cur := []Neigh{{ip("10.244.1.0"), mac("02:00:00:00:00:01")}, {ip("10.244.2.0"), mac("02:00:00:00:00:02")}, {ip("10.244.9.0"), mac("02:00:00:00:00:09")}}
	want := []Neigh{{ip("10.244.1.0"), mac("02:00:00:00:00:01")}, {ip("10.244.2.0"), mac("02:00:00:00:00:22")}, {ip("10.244.3.0"), mac("02:00:00:00:00:03")}}
	set, del := DiffNeigh(want, cur)
	if len(set) != 2 || set[0].IP != ip("10.244.2.0") || set[1].IP != ip("10.244.3.0") {
		t.Fatalf("set %v", set)
	}
	if len(del) != 1 || del[0].IP != ip("10.244.9.0") {
		t.Fatalf("del %v", del)
	}
	if s, d := DiffNeigh(want, want); len(s)+len(d) != 0 {
		t.Fatalf("no-op diff: %v %v", s, d)
	}
}

func TestDiffFDB(t *testing.T) {
	ip := netip.MustParseAddr
	cur := []FDBEntry{{mac("02:00:00:00:00:01"), ip("192.168.50.11")}, {mac("02:00:00:00:00:02"), ip("192.168.50.12")}}
	// Peer 2 changed its MAC, peer 1 moved to another address.
	want := []FDBEntry{{mac("02:00:00:00:00:01"), ip("192.168.50.21")}, {mac("02:00:00:00:00:22"), ip("192.168.50.12")}}
	set, del := DiffFDB(want, cur)
	if len(set) != 2 {
		t.Fatalf("set %v", set)
	}
	if len(del) != 2 || del[0].Dst != ip("192.168.50.11") || del[1].MAC.String() != "02:00:00:00:00:02" {
		t.Fatalf("del %v", del)
	}
}
