package routes

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/internal/nettest"
)

// vxlanNS is a namespace with a vxlan device as flanneld makes one.
func vxlanNS(t *testing.T) *nettest.NS {
	t.Helper()
	ns := vpc(t)
	eth0, err := ns.Handle().LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	v := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "flannel.1"}, VxlanId: 1, VtepDevIndex: eth0.Attrs().Index, Port: 8472}
	if err := ns.Handle().LinkAdd(v); err != nil {
		t.Fatal(err)
	}
	ns.MustExec(t, "ip", "addr", "add", "10.244.1.0/32", "dev", "flannel.1")
	ns.MustExec(t, "ip", "link", "set", "flannel.1", "up")
	return ns
}

// TestNeighTableKernel: permanent entries round-trip, replace in place,
// learnt (non-permanent) entries are invisible, delete reports ErrNotFound.
func TestNeighTableKernel(t *testing.T) {
	ns := vxlanNS(t)
	tbl, err := NewNeighTable(ns.Name(), "flannel.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tbl.Close)
	ctx := t.Context()
	n := Neigh{IP: netip.MustParseAddr("10.244.2.0"), MAC: mac("02:00:00:00:00:02")}
	if err := tbl.Set(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.MAC = mac("02:00:00:00:00:22")
	if err := tbl.Set(ctx, n); err != nil {
		t.Fatal(err)
	}
	ns.MustExec(t, "ip", "neigh", "add", "10.244.3.0", "lladdr", "02:00:00:00:00:03", "dev", "flannel.1", "nud", "stale")
	got, err := tbl.List(ctx)
	if err != nil || len(got) != 1 || got[0].String() != "10.244.2.0 lladdr 02:00:00:00:00:22" {
		t.Fatalf("List %v (%v)", got, err)
	}
	if out := string(ns.MustExec(t, "ip", "neigh", "show", "dev", "flannel.1", "nud", "permanent")); !strings.Contains(out, "10.244.2.0 lladdr 02:00:00:00:00:22 PERMANENT") {
		t.Fatalf("ip neigh: %s", out)
	}
	if err := tbl.Delete(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Delete(ctx, n); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

// TestFDBTableKernel: entries are keyed by MAC, replaced in place, and
// match what `bridge fdb` shows.
func TestFDBTableKernel(t *testing.T) {
	ns := vxlanNS(t)
	tbl, err := NewFDBTable(ns.Name(), "flannel.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tbl.Close)
	ctx := t.Context()
	e := FDBEntry{MAC: mac("02:00:00:00:00:02"), Dst: netip.MustParseAddr("192.168.50.12")}
	if err := tbl.Set(ctx, e); err != nil {
		t.Fatal(err)
	}
	e.Dst = netip.MustParseAddr("192.168.50.22")
	if err := tbl.Set(ctx, e); err != nil {
		t.Fatal(err)
	}
	got, err := tbl.List(ctx)
	if err != nil || len(got) != 1 || got[0].String() != "02:00:00:00:00:02 dst 192.168.50.22" {
		t.Fatalf("List %v (%v)", got, err)
	}
	if out := string(ns.MustExec(t, "bridge", "fdb", "show", "dev", "flannel.1")); !strings.Contains(out, "02:00:00:00:00:02 dst 192.168.50.22 self permanent") {
		t.Fatalf("bridge fdb: %s", out)
	}
	if err := tbl.Delete(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Delete(ctx, e); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := NewFDBTable(ns.Name(), "nope0"); err != nil {
		t.Fatal(err) // the device is looked up per call, not at open
	}
}

// TestAddOnLinkKernel: a route via a gateway outside every connected
// subnet needs onlink; AddOnLink installs it, replaces it, and List/Delete
// treat it like any other owned route.
func TestAddOnLinkKernel(t *testing.T) {
	ns := vxlanNS(t)
	tbl, err := NewNetlinkTable(ns.Name(), 0, ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tbl.Close)
	ctx := t.Context()
	r := Route{Dst: netip.MustParsePrefix("10.244.2.0/24"), Gw: netip.MustParseAddr("10.244.2.0"), Dev: "flannel.1"}
	if err := tbl.Add(ctx, r); err == nil {
		t.Fatal("plain Add of an off-link gateway succeeded; the test premise is wrong")
	}
	if err := tbl.AddOnLink(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := tbl.AddOnLink(ctx, r); err != nil {
		t.Fatalf("idempotent: %v", err)
	}
	if out := string(ns.MustExec(t, "ip", "route", "show", "10.244.2.0/24")); !strings.Contains(out, "via 10.244.2.0 dev flannel.1 proto 78 onlink") {
		t.Fatalf("ip route: %s", out)
	}
	got, err := tbl.List(ctx)
	if err != nil || len(got) != 1 || !r.Matches(got[0]) {
		t.Fatalf("List %v (%v)", got, err)
	}
	if err := tbl.AddOnLink(ctx, Route{Dst: r.Dst, Gw: r.Gw}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no dev: %v", err)
	}
	if err := tbl.Delete(ctx, r); err != nil {
		t.Fatal(err)
	}
}
