package cni

import (
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nettest"
)

// TestGetLinkDecodes: getLink's own decoder reads a bridge, a bridge port
// and a veth peer the way the netlink library does, as far as the plugin
// looks.
func TestGetLinkDecodes(t *testing.T) {
	ns := nettest.New(t)
	ns.MustExec(t, "ip", "link", "add", "br9", "address", "0a:58:0a:f4:01:01", "mtu", "1400", "type", "bridge")
	ns.MustExec(t, "ip", "link", "add", "va9", "mtu", "1400", "group", "7", "type", "veth", "peer", "name", "vb9")
	ns.MustExec(t, "ip", "link", "set", "va9", "master", "br9", "alias", "nodenet:n:c:eth0", "promisc", "on", "up")
	ns.MustExec(t, "ip", "link", "set", "br9", "up")
	err := ns.Do(func() error {
		c, err := rtnlSocket(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		for _, name := range []string{"br9", "va9", "vb9", "lo"} {
			got, err := c.getLink(name, 0)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want, err := ns.Handle().LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			w := want.Attrs()
			if got.kind != want.Type() || got.index != w.Index || got.name != w.Name || got.alias != w.Alias || got.flags != w.RawFlags ||
				got.parent != w.ParentIndex || got.master != w.MasterIndex || got.mac.String() != w.HardwareAddr.String() ||
				got.mtu != w.MTU || int(got.promisc) != w.Promisc || got.group != w.Group {
				t.Errorf("%s: decoded %+v\nlibrary has %s %+v", name, *got, want.Type(), *w)
			}
			byIndex, err := c.getLink("", got.index)
			if err != nil || byIndex.name != name {
				t.Errorf("%s by index %d: %v %v", name, got.index, byIndex, err)
			}
		}
		if _, err := c.getLink("nope9", 0); !isLinkNotFound(err) {
			t.Errorf("missing link: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDumps: the link, address, route and bridge-port dumps CHECK, GC and
// STATUS rely on, and bridge creation, against what ip(8) set up and the
// netlink library reads.
func TestDumps(t *testing.T) {
	ns := nettest.New(t)
	ns.MustExec(t, "ip", "link", "add", "va8", "type", "veth", "peer", "name", "vb8")
	err := ns.Do(func() error {
		c, err := rtnlSocket(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.createBridge("br8", 1400, mac{0x0a, 0x58, 1, 2, 3, 4}, true); err != nil {
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

		links, err := c.listLinks()
		var names []string
		for _, l := range links {
			names = append(names, l.name+"/"+l.kind)
		}
		slices.Sort(names)
		if err != nil || !slices.Equal(names, []string{"br8/bridge", "lo/device", "va8/veth", "vb8/veth"}) {
			t.Errorf("links %v %v", names, err)
		}
		brLink, err := c.getLink("br8", 0)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := c.listAddrs(brLink.index)
		var got []string
		for _, a := range addrs {
			if !a.Addr().IsLinkLocalUnicast() {
				got = append(got, a.String())
			}
		}
		if err != nil || !slices.Equal(got, []string{"10.9.0.1/24", "fd00:9::1/64"}) {
			t.Errorf("addresses %v %v", got, err)
		}
		routes, err := c.listRoutes(brLink.index)
		got = nil
		for _, r := range routes {
			if !r.dst.Addr().IsLinkLocalUnicast() {
				got = append(got, r.dst.String()+" "+r.gw.String())
			}
		}
		slices.Sort(got)
		want := []string{"0.0.0.0/0 10.9.0.254", "10.10.0.0/16 10.9.0.254", "10.9.0.0/24 invalid IP", "fd00:9::/64 invalid IP"}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("routes %v %v, want %v", got, err, want)
		}
		va, _ := c.getLink("va8", 0)
		vb, _ := c.getLink("vb8", 0)
		if on, err := c.hairpin(va.index); err != nil || !on {
			t.Errorf("hairpin of a hairpin port: %v %v", on, err)
		}
		if _, err := c.hairpin(vb.index); err == nil {
			t.Error("hairpin of a link that is no bridge port")
		}
		if err := c.createBridge("br8", 0, mac{0x0a, 0x58, 1, 2, 3, 5}, false); !errors.Is(err, unix.EEXIST) {
			t.Errorf("second create: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
