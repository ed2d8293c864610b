package routes

import (
	"fmt"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
)

func netlinkProto(p int) netlink.RouteProtocol { return netlink.RouteProtocol(p) }

func TestDiff(t *testing.T) {
	a := Route{Dst: pfx("10.244.1.0/24"), Gw: ip("192.168.50.11")}
	b := Route{Dst: pfx("10.244.2.0/24"), Gw: ip("192.168.50.12")}
	b2 := Route{Dst: pfx("10.244.2.0/24"), Gw: ip("192.168.50.22")}
	v6 := Route{Dst: pfx("fd00:244:1::/64"), Gw: ip("fd00:50::11")}
	// What the kernel reports: device, table and protocol filled in.
	seen := func(r Route) Route { r.Dev, r.Table, r.Protocol = "eth0", 254, ProtocolNodenet; return r }

	for _, tc := range []struct {
		name             string
		desired, current []Route
		add, del         []Route
	}{
		{name: "empty"},
		{name: "all new", desired: []Route{a, v6}, add: []Route{a, v6}},
		{name: "all stale", current: []Route{seen(a), seen(v6)}, del: []Route{seen(a), seen(v6)}},
		{name: "in sync despite kernel detail", desired: []Route{a, b, v6}, current: []Route{seen(v6), seen(b), seen(a)}},
		{name: "gateway change", desired: []Route{a, b2}, current: []Route{seen(a), seen(b)}, add: []Route{b2}, del: []Route{seen(b)}},
		{name: "duplicates added once", desired: []Route{a, a, b}, current: []Route{seen(b)}, add: []Route{a}},
		{name: "duplicate in kernel deleted", desired: []Route{a}, current: []Route{seen(a), seen(b), seen(b2)}, del: []Route{seen(b), seen(b2)}},
		{
			name:    "desired device must match",
			desired: []Route{{Dst: a.Dst, Gw: a.Gw, Dev: "eth1"}},
			current: []Route{seen(a)},
			add:     []Route{{Dst: a.Dst, Gw: a.Gw, Dev: "eth1"}},
			del:     []Route{seen(a)},
		},
		{
			name:    "desired table must match",
			desired: []Route{{Dst: a.Dst, Gw: a.Gw, Table: 100}},
			current: []Route{seen(a)},
			add:     []Route{{Dst: a.Dst, Gw: a.Gw, Table: 100}},
			del:     []Route{seen(a)},
		},
		{
			name:    "gateway route is not a device route",
			desired: []Route{{Dst: a.Dst, Dev: "eth0"}},
			current: []Route{seen(a)},
			add:     []Route{{Dst: a.Dst, Dev: "eth0"}},
			del:     []Route{seen(a)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			add, del := Diff(tc.desired, tc.current)
			if !slices.Equal(add, tc.add) || !slices.Equal(del, tc.del) {
				t.Errorf("Diff:\n add %v\n del %v\nwant\n add %v\n del %v", add, del, tc.add, tc.del)
			}
		})
	}
}

// TestDiffConverges applies Diff's plan to a fake in the prescribed order
// and checks that a second Diff finds nothing to do.
func TestDiffConverges(t *testing.T) {
	f, err := NewFake(0, ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for i := range 50 {
		mustOK(t, f.Add(ctx, Route{Dst: pfx(fmt.Sprintf("10.244.%d.0/24", i)), Gw: ip(fmt.Sprintf("192.168.50.%d", 10+i))}))
	}
	var desired []Route
	for i := 25; i < 75; i++ { // half kept, half new; gateways moved for odd ones
		gw := 10 + i
		if i%2 == 1 {
			gw += 100
		}
		desired = append(desired, Route{Dst: pfx(fmt.Sprintf("10.244.%d.0/24", i)), Gw: ip(fmt.Sprintf("192.168.50.%d", gw))})
	}
	cur, _ := f.List(ctx)
	add, del := Diff(desired, cur)
	for _, r := range add {
		mustOK(t, f.Add(ctx, r))
	}
	for _, r := range del {
		if err := f.Delete(ctx, r); err != nil && !isNotFound(err) {
			t.Fatal(err)
		}
	}
	cur, _ = f.List(ctx)
	if add, del := Diff(desired, cur); len(add)+len(del) != 0 || len(cur) != len(desired) {
		t.Fatalf("not converged: add %v del %v (have %d routes)", add, del, len(cur))
	}
}
