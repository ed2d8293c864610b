package routes

import (
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/internal/nettest"
)

// vpc builds the namespace the kernel contract runs in: eth0 with
// 192.168.50.1/24 and fd00:50::1/64, a veth whose peer sits in a second
// namespace so the link has carrier and both subnets are connected.
func vpc(t *testing.T) *nettest.NS {
	t.Helper()
	ns, peer := nettest.New(t), nettest.New(t)
	nettest.Link(t, ns, "eth0", "192.168.50.1/24", peer, "eth0", "192.168.50.254/24")
	eth0, err := ns.Handle().LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := netlink.ParseAddr("fd00:50::1/64")
	a.Flags |= syscall.IFA_F_NODAD
	if err := ns.Handle().AddrAdd(eth0, a); err != nil {
		t.Fatal(err)
	}
	return ns
}

func newNetlinkEnv(tableID int) func(t *testing.T) *contractEnv {
	return func(t *testing.T) *contractEnv {
		ns := vpc(t)
		tbl, err := NewNetlinkTable(ns.Name(), tableID, ProtocolNodenet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tbl.Close)
		id := tableID
		if id == 0 {
			id = MainTable
		}
		return &contractEnv{
			table: tbl,
			id:    id,
			proto: ProtocolNodenet,
			dev:   "eth0",
			addForeign: func(t *testing.T, r Route) {
				args := []string{"route", "add", r.Dst.String()}
				if r.Gw.IsValid() {
					args = append(args, "via", r.Gw.String())
				}
				if r.Dev != "" {
					args = append(args, "dev", r.Dev)
				}
				ns.MustExec(t, "ip", append(args, "proto", "static", "table", strconv.Itoa(id))...)
			},
			all: func(t *testing.T) []Route { return kernelTable(t, ns, id) },
		}
	}
}

// kernelTable reads the whole table straight from the kernel, bypassing
// NetlinkTable.
func kernelTable(t *testing.T, ns *nettest.NS, id int) []Route {
	t.Helper()
	nrs, err := ns.Handle().RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: id}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	var out []Route
	for _, nr := range nrs {
		if r, ok := fromNetlink(nr, nil); ok {
			out = append(out, r)
		}
	}
	return out
}

func TestNetlinkContract(t *testing.T) {
	nettest.RequirePrivileged(t)
	t.Run("main", func(t *testing.T) { testTableContract(t, newNetlinkEnv(0)) })
	t.Run("table100", func(t *testing.T) { testTableContract(t, newNetlinkEnv(100)) })
}

// TestNetlinkTableKernelView checks what only the kernel can show: the
// routes carry our protocol number and table, the kernel's own connected
// routes are not listed, and `ip route` agrees.
func TestNetlinkTableKernelView(t *testing.T) {
	nettest.RequirePrivileged(t)
	ns := vpc(t)
	// By path this time; the contract uses the iproute2 name.
	tbl, err := NewNetlinkTable(ns.Path(), 0, ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	ctx := t.Context()
	mustOK(t, tbl.Add(ctx, Route{Dst: pfx("10.244.1.0/24"), Gw: ip("192.168.50.11")}))
	mustOK(t, tbl.Add(ctx, Route{Dst: pfx("fd00:244:1::/64"), Gw: ip("fd00:50::11")}))

	got, err := tbl.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Route{
		{Dst: pfx("10.244.1.0/24"), Gw: ip("192.168.50.11"), Dev: "eth0", Table: MainTable, Protocol: ProtocolNodenet},
		{Dst: pfx("fd00:244:1::/64"), Gw: ip("fd00:50::11"), Dev: "eth0", Table: MainTable, Protocol: ProtocolNodenet},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List = %v, want %v", got, want)
	}
	out := string(ns.MustExec(t, "ip", "-4", "route", "show", "proto", "78"))
	if out != "10.244.1.0/24 via 192.168.50.11 dev eth0 \n" {
		t.Errorf("ip route show proto 78 = %q", out)
	}
	all := kernelTable(t, ns, MainTable)
	if !slices.ContainsFunc(all, func(r Route) bool { return r.Dst == pfx("192.168.50.0/24") }) {
		t.Fatalf("kernel table lacks the connected route: %v", all)
	}
}

func TestNewNetlinkTableErrors(t *testing.T) {
	nettest.RequirePrivileged(t)
	if _, err := NewNetlinkTable("nnt-does-not-exist", 0, ProtocolNodenet); err == nil {
		t.Error("opened a namespace that does not exist")
	}
	if _, err := NewNetlinkTable("/nonexistent/ns", 0, ProtocolNodenet); err == nil {
		t.Error("opened a namespace path that does not exist")
	}
	ns := nettest.New(t)
	if _, err := NewNetlinkTable(ns.Name(), 0, 0); err == nil {
		t.Error("accepted protocol 0")
	}
	if _, err := NewNetlinkTable(ns.Name(), 255, ProtocolNodenet); err == nil {
		t.Error("accepted the local table")
	}
}

// TestNetlinkAddMissingDevice: a device that does not exist cannot carry a
// route, so Delete reports ErrNotFound and Add a plain error.
func TestNetlinkMissingDevice(t *testing.T) {
	ns := vpc(t)
	tbl, err := NewNetlinkTable(ns.Name(), 0, ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	r := Route{Dst: pfx("10.244.1.0/24"), Dev: "nope0"}
	if err := tbl.Add(t.Context(), r); err == nil || isNotFound(err) {
		t.Errorf("Add via missing device: %v", err)
	}
	expectErr(t, tbl.Delete(t.Context(), r), ErrNotFound)
}
