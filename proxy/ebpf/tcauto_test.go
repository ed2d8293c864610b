package ebpf

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/internal/nettest"
)

func TestSelectInterfaces(t *testing.T) {
	a := netip.MustParseAddr
	node := []netip.Addr{a("172.30.0.11"), a("fd00::11")}
	links := []LinkAddrs{
		{Name: "lo", Loopback: true, Addrs: []netip.Addr{a("127.0.0.1"), a("172.30.0.11")}},
		{Name: "eth0", Addrs: []netip.Addr{a("172.30.0.11"), a("fe80::1")}},
		{Name: "bond0", Addrs: []netip.Addr{a("fd00::11")}},
		{Name: "eth1", Addrs: []netip.Addr{a("192.168.1.5")}}, // no node address
		{Name: "cni0", Addrs: []netip.Addr{a("172.30.0.11")}},
		{Name: "flannel.1", Addrs: []netip.Addr{a("172.30.0.11")}},
		{Name: "flannel-wg", Addrs: []netip.Addr{a("fd00::11")}},
		{Name: "veth1234", Addrs: []netip.Addr{a("172.30.0.11")}},
		{Name: "br-ext", Addrs: []netip.Addr{netip.AddrFrom16(a("172.30.0.11").As16())}}, // v4-mapped
		{Name: "down"},
	}
	got := SelectInterfaces(links, node)
	if want := []string{"bond0", "br-ext", "eth0"}; !slices.Equal(got, want) {
		t.Errorf("SelectInterfaces = %v, want %v", got, want)
	}
	if got := SelectInterfaces(links, nil); got != nil {
		t.Errorf("no node address: SelectInterfaces = %v, want none", got)
	}
}

// TestNodeInterfacesKernel chooses among real links of a throwaway
// namespace: the node's address on a bridge standing for the NIC, the CNI
// bridge, a flannel VXLAN device and a pod veth's host end holding the
// same address, and a link with another address.
func TestNodeInterfacesKernel(t *testing.T) {
	nettest.RequirePrivileged(t)
	ns := nettest.New(t)
	h := ns.Handle()
	addLink := func(l netlink.Link, cidr string) {
		t.Helper()
		if err := h.LinkAdd(l); err != nil {
			t.Fatalf("add %s: %v", l.Attrs().Name, err)
		}
		if cidr == "" {
			return
		}
		addr, err := netlink.ParseAddr(cidr)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.AddrAdd(l, addr); err != nil {
			t.Fatalf("address %s: %v", l.Attrs().Name, err)
		}
	}
	addLink(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "ext0"}}, "10.99.0.11/24")
	addLink(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "other0"}}, "10.98.0.11/24")
	addLink(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}, "10.99.0.12/24")
	addLink(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: "flannel.1"}, VxlanId: 1, Port: 8472, SrcAddr: net.ParseIP("10.99.0.11")}, "10.99.0.13/32")
	addLink(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0abc"}, PeerName: "eth0"}, "10.99.0.14/32")
	node := []netip.Addr{netip.MustParseAddr("10.99.0.11"), netip.MustParseAddr("10.99.0.12"), netip.MustParseAddr("10.99.0.13"), netip.MustParseAddr("10.99.0.14")}
	var got []string
	err := ns.Do(func() error {
		var err error
		got, err = NodeInterfaces(node)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ext0"}; !slices.Equal(got, want) {
		t.Errorf("NodeInterfaces = %v, want %v", got, want)
	}
	err = ns.Do(func() error {
		_, err := NodeInterfaces([]netip.Addr{netip.MustParseAddr("10.97.0.1")})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "no interface holds one of the node's addresses [10.97.0.1]") {
		t.Errorf("no matching interface: err = %v", err)
	}
}
