package kernel

import (
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nettest"
)

// dialIn opens a route netlink socket inside ns. The socket stays there
// after Do returns, so the test works with it on its own goroutine, where
// t.Fatal may be called (not inside Do).
func dialIn(t *testing.T, ns *nettest.NS) *Conn {
	t.Helper()
	var c *Conn
	if err := ns.Do(func() (err error) {
		c, err = Dial()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestGetLinkDecodes: Link's own decoder reads a bridge, a bridge port and
// a veth peer the way the netlink library does, as far as the plugin
// looks.
func TestGetLinkDecodes(t *testing.T) {
	ns := nettest.New(t)
	ns.MustExec(t, "ip", "link", "add", "br9", "address", "0a:58:0a:f4:01:01", "mtu", "1400", "type", "bridge")
	ns.MustExec(t, "ip", "link", "add", "va9", "mtu", "1400", "group", "7", "type", "veth", "peer", "name", "vb9")
	ns.MustExec(t, "ip", "link", "set", "va9", "master", "br9", "alias", "nodenet:n:c:eth0", "promisc", "on", "up")
	ns.MustExec(t, "ip", "link", "set", "br9", "up")
	c := dialIn(t, ns)
	for _, name := range []string{"br9", "va9", "vb9", "lo"} {
		got, err := c.Link(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := ns.Handle().LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		w := want.Attrs()
		if got.Kind != want.Type() || got.Index != w.Index || got.Name != w.Name || got.Alias != w.Alias || got.Flags != w.RawFlags ||
			got.Parent != w.ParentIndex || got.Master != w.MasterIndex || got.MAC.String() != w.HardwareAddr.String() ||
			got.MTU != w.MTU || int(got.Promisc) != w.Promisc || got.Group != w.Group {
			t.Errorf("%s: decoded %+v\nlibrary has %s %+v", name, *got, want.Type(), *w)
		}
		byIndex, err := c.LinkByIndex(got.Index)
		if err != nil || byIndex.Name != name {
			t.Errorf("%s by index %d: %v %v", name, got.Index, byIndex, err)
		}
	}
	if _, err := c.Link("nope9"); !IsNotFound(err) {
		t.Errorf("missing link: %v", err)
	}
}

// TestDumps: the link, address, route and bridge-port dumps CHECK, GC and
// STATUS rely on, and bridge creation, against what ip(8) set up and the
// netlink library reads.
func TestDumps(t *testing.T) {
	ns := nettest.New(t)
	ns.MustExec(t, "ip", "link", "add", "va8", "type", "veth", "peer", "name", "vb8")
	c := dialIn(t, ns)
	if err := c.CreateBridge("br8", 1400, MAC{0x0a, 0x58, 1, 2, 3, 4}, true); err != nil {
		t.Fatalf("create bridge: %v", err)
	}
	br, err := ns.Handle().LinkByName("br8")
	if err != nil || br.Type() != "bridge" || br.Attrs().MTU != 1400 || br.Attrs().HardwareAddr.String() != "0a:58:01:02:03:04" ||
		br.Attrs().Promisc != 1 || br.Attrs().RawFlags&0x1 == 0 {
		t.Fatalf("bridge as created: %v %+v", err, br)
	}
	ns.MustExec(t, "ip", "link", "set", "va8", "master", "br8", "up")
	ns.MustExec(t, "ip", "link", "set", "va8", "type", "bridge_slave", "hairpin", "on")
	ns.MustExec(t, "ip", "addr", "add", "10.9.0.1/24", "dev", "br8")
	ns.MustExec(t, "ip", "addr", "add", "fd00:9::1/64", "dev", "br8", "nodad")
	ns.MustExec(t, "ip", "route", "add", "10.10.0.0/16", "via", "10.9.0.254", "dev", "br8")
	ns.MustExec(t, "ip", "route", "add", "default", "via", "10.9.0.254", "dev", "br8")

	links, err := c.Links()
	var names []string
	for _, l := range links {
		names = append(names, l.Name+"/"+l.Kind)
	}
	slices.Sort(names)
	if err != nil || !slices.Equal(names, []string{"br8/bridge", "lo/device", "va8/veth", "vb8/veth"}) {
		t.Errorf("links %v %v", names, err)
	}
	brLink, err := c.Link("br8")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := c.Addrs(brLink.Index)
	var got []string
	for _, a := range addrs {
		if !a.Addr().IsLinkLocalUnicast() {
			got = append(got, a.String())
		}
	}
	if err != nil || !slices.Equal(got, []string{"10.9.0.1/24", "fd00:9::1/64"}) {
		t.Errorf("addresses %v %v", got, err)
	}
	routes, err := c.Routes(brLink.Index)
	got = nil
	for _, r := range routes {
		if !r.Dst.Addr().IsLinkLocalUnicast() {
			got = append(got, r.Dst.String()+" "+r.GW.String())
		}
	}
	slices.Sort(got)
	want := []string{"0.0.0.0/0 10.9.0.254", "10.10.0.0/16 10.9.0.254", "10.9.0.0/24 invalid IP", "fd00:9::/64 invalid IP"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("routes %v %v, want %v", got, err, want)
	}
	va, err := c.Link("va8")
	if err != nil {
		t.Fatal(err)
	}
	vb, err := c.Link("vb8")
	if err != nil {
		t.Fatal(err)
	}
	if on, err := c.Hairpin(va.Index); err != nil || !on {
		t.Errorf("hairpin of a hairpin port: %v %v", on, err)
	}
	if _, err := c.Hairpin(vb.Index); err == nil {
		t.Error("hairpin of a link that is no bridge port")
	}
	if err := c.CreateBridge("br8", 0, MAC{0x0a, 0x58, 1, 2, 3, 5}, false); !errors.Is(err, unix.EEXIST) {
		t.Errorf("second create: %v", err)
	}
}

// TestLinkIndex covers the lookup ADD falls back to on kernels that do not
// echo the new veth (before 6.3), on a socket opened from the namespace
// file.
func TestLinkIndex(t *testing.T) {
	pod := nettest.New(t)
	podNS, err := OpenNetNS(pod.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer podNS.Close()
	s, err := podNS.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if l, err := s.Link("lo"); err != nil || l.Index != 1 {
		t.Fatalf("lo: %v %v", l, err)
	}
	if _, err := s.Link("nope0"); !errors.Is(err, unix.ENODEV) {
		t.Fatalf("missing link: %v", err)
	}
}
