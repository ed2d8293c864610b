package routes

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
)

// contractEnv is one Table under test plus what the contract needs to see
// past it: a way to add routes someone else owns, and the whole table.
type contractEnv struct {
	table Table
	id    int                   // the routing table, normalised (0 -> 254)
	proto netlink.RouteProtocol // what table owns
	dev   string                // a device on which every gateway below is on-link
	// addForeign adds r (Table and Protocol unset) as someone else's
	// route with protocol "static", the way an administrator would.
	addForeign func(t *testing.T, r Route)
	// all lists the whole table, any protocol.
	all func(t *testing.T) []Route
}

type family struct {
	name       string
	dst, other netip.Prefix
	gwA, gwB   netip.Addr
}

var families = []family{
	{"ipv4", pfx("10.244.1.0/24"), pfx("10.244.2.0/24"), ip("192.168.50.11"), ip("192.168.50.12")},
	{"ipv6", pfx("fd00:244:1::/64"), pfx("fd00:244:2::/64"), ip("fd00:50::11"), ip("fd00:50::12")},
}

// testTableContract is the behaviour every Table must have. It runs
// against the Fake and against NetlinkTable in a throwaway namespace; a
// difference between them fails one of the two runs.
func testTableContract(t *testing.T, newEnv func(t *testing.T) *contractEnv) {
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			for _, c := range contractCases {
				t.Run(c.name, func(t *testing.T) { c.run(t, newEnv(t), f) })
			}
		})
	}
}

var contractCases = []struct {
	name string
	run  func(t *testing.T, e *contractEnv, f family)
}{
	{"add list delete", func(t *testing.T, e *contractEnv, f family) {
		ctx := t.Context()
		a := Route{Dst: f.dst, Gw: f.gwA}
		b := Route{Dst: f.other, Gw: f.gwB}
		mustOK(t, e.table.Add(ctx, a))
		mustOK(t, e.table.Add(ctx, b))
		got := mustList(t, e)
		expectExactly(t, got, a, b)
		for _, r := range got {
			if r.Table != e.id || r.Protocol != e.proto {
				t.Errorf("listed %s: want table %d proto %d", r, e.id, e.proto)
			}
		}
		mustOK(t, e.table.Delete(ctx, a))
		expectExactly(t, mustList(t, e), b)
		// Deleting what List returned (kernel fills in Dev) works too.
		mustOK(t, e.table.Delete(ctx, mustList(t, e)[0]))
		expectExactly(t, mustList(t, e))
	}},
	{"add is idempotent", func(t *testing.T, e *contractEnv, f family) {
		a := Route{Dst: f.dst, Gw: f.gwA}
		mustOK(t, e.table.Add(t.Context(), a))
		mustOK(t, e.table.Add(t.Context(), a))
		expectExactly(t, mustList(t, e), a)
	}},
	{"add replaces owned route to same destination", func(t *testing.T, e *contractEnv, f family) {
		ctx := t.Context()
		old := Route{Dst: f.dst, Gw: f.gwA}
		cur := Route{Dst: f.dst, Gw: f.gwB}
		mustOK(t, e.table.Add(ctx, old))
		mustOK(t, e.table.Add(ctx, cur))
		expectExactly(t, mustList(t, e), cur)
		// The make-before-break sequence Diff prescribes: deleting the
		// superseded route finds nothing and leaves the new one alone.
		err := e.table.Delete(ctx, old)
		expectErr(t, err, ErrNotFound, syscall.ESRCH)
		expectExactly(t, mustList(t, e), cur)
	}},
	{"foreign route is invisible and survives", func(t *testing.T, e *contractEnv, f family) {
		ctx := t.Context()
		foreign := Route{Dst: f.other, Gw: f.gwA}
		e.addForeign(t, foreign)
		mustOK(t, e.table.Add(ctx, Route{Dst: f.dst, Gw: f.gwB}))
		expectExactly(t, mustList(t, e), Route{Dst: f.dst, Gw: f.gwB})
		expectErr(t, e.table.Delete(ctx, foreign), ErrNotFound, syscall.ESRCH)
		expectErr(t, e.table.Delete(ctx, Route{Dst: f.other, Dev: e.dev}), ErrNotFound, syscall.ESRCH)
		expectForeign(t, e, foreign)
	}},
	{"add over foreign route fails", func(t *testing.T, e *contractEnv, f family) {
		foreign := Route{Dst: f.dst, Gw: f.gwA}
		e.addForeign(t, foreign)
		err := e.table.Add(t.Context(), Route{Dst: f.dst, Gw: f.gwB})
		expectErr(t, err, ErrExists, syscall.EEXIST)
		expectExactly(t, mustList(t, e))
		expectForeign(t, e, foreign)
	}},
	{"delete missing route", func(t *testing.T, e *contractEnv, f family) {
		expectErr(t, e.table.Delete(t.Context(), Route{Dst: f.dst, Gw: f.gwA}), ErrNotFound, syscall.ESRCH)
		mustOK(t, e.table.Add(t.Context(), Route{Dst: f.dst, Gw: f.gwA}))
		// A device-qualified delete must match the device too.
		expectErr(t, e.table.Delete(t.Context(), Route{Dst: f.dst, Dev: "lo"}), ErrNotFound, syscall.ESRCH)
		expectExactly(t, mustList(t, e), Route{Dst: f.dst, Gw: f.gwA})
	}},
	{"device route", func(t *testing.T, e *contractEnv, f family) {
		r := Route{Dst: f.dst, Dev: e.dev}
		mustOK(t, e.table.Add(t.Context(), r))
		expectExactly(t, mustList(t, e), r)
		mustOK(t, e.table.Delete(t.Context(), r))
		expectExactly(t, mustList(t, e))
	}},
	{"invalid routes are refused", func(t *testing.T, e *contractEnv, f family) {
		otherFamilyGw := ip("192.168.50.11")
		if f.gwA.Is4() {
			otherFamilyGw = ip("fd00:50::11")
		}
		bad := []Route{
			{Gw: f.gwA},
			{Dst: netip.PrefixFrom(f.gwA, f.dst.Bits()), Gw: f.gwA}, // host bits
			{Dst: f.dst},
			{Dst: f.dst, Gw: otherFamilyGw},
			{Dst: f.dst, Gw: f.gwA, Table: e.id + 1},
			{Dst: f.dst, Gw: f.gwA, Protocol: e.proto + 1},
		}
		for _, r := range bad {
			expectErr(t, e.table.Add(t.Context(), r), ErrInvalid)
			expectErr(t, e.table.Delete(t.Context(), r), ErrInvalid)
		}
		expectExactly(t, mustList(t, e))
	}},
	{"cancelled context", func(t *testing.T, e *contractEnv, f family) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		r := Route{Dst: f.dst, Gw: f.gwA}
		expectErr(t, e.table.Add(ctx, r), context.Canceled)
		expectErr(t, e.table.Delete(ctx, r), context.Canceled)
		_, err := e.table.List(ctx)
		expectErr(t, err, context.Canceled)
		expectExactly(t, mustList(t, e))
	}},
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustList(t *testing.T, e *contractEnv) []Route {
	t.Helper()
	rs, err := e.table.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// expectExactly checks that got are exactly the routes want describes,
// with Diff's notion of "describes".
func expectExactly(t *testing.T, got []Route, want ...Route) {
	t.Helper()
	if add, del := Diff(want, got); len(add) != 0 || len(del) != 0 || len(got) != len(want) {
		t.Fatalf("routes: got %v, want %v (missing %v, unexpected %v)", got, want, add, del)
	}
}

func expectErr(t *testing.T, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("error %q is not %v", err, target)
		}
	}
}

// expectForeign checks that the foreign route is still there, unchanged.
func expectForeign(t *testing.T, e *contractEnv, foreign Route) {
	t.Helper()
	all := e.all(t)
	if !slices.ContainsFunc(all, func(r Route) bool {
		return r.Dst == foreign.Dst && r.Gw == foreign.Gw && r.Protocol == protoStatic
	}) {
		t.Fatalf("foreign route %s proto static is gone; table has %v", foreign, all)
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }
