package cni

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"
)

// link is what the plugin reads of a network interface.
type link struct {
	index int
	name  string
	alias string
	// kind is the IFLA_INFO_KIND ("bridge", "veth"); "device" for a link
	// without one, as the netlink library calls it.
	kind  string
	flags uint32
	// parent is IFLA_LINK: a veth end's peer.
	parent  int
	master  int
	mac     mac
	mtu     int
	promisc uint32
	group   uint32
}

func (l *link) up() bool { return l.flags&unix.IFF_UP != 0 }

// mac is a hardware address, printed like net.HardwareAddr.
type mac []byte

func (m mac) String() string {
	var b strings.Builder
	for i, c := range m {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x", c)
	}
	return b.String()
}

// isLinkNotFound reports a link that does not exist.
func isLinkNotFound(err error) bool { return errors.Is(err, unix.ENODEV) }

// getLink looks a link up by name (with index 0) or by index. A missing
// link is ENODEV.
func (c *rtnlConn) getLink(name string, index int) (*link, error) {
	req := newRequest(unix.RTM_GETLINK, unix.NLM_F_ACK).add(ifinfomsg(unix.AF_UNSPEC, index, 0, 0))
	req.attr(unix.IFLA_EXT_MASK, u32(rtextFilterVF))
	if index == 0 {
		nameAttr := uint16(unix.IFLA_IFNAME)
		if len(name) > 15 {
			nameAttr = unix.IFLA_ALT_IFNAME
		}
		req.attr(nameAttr, cstr(name))
	}
	msgs, err := c.exec(req, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("look up link %q (index %d): %d answers", name, index, len(msgs))
	}
	return decodeLink(msgs[0])
}

// listLinks lists the links of the socket's namespace.
func (c *rtnlConn) listLinks() ([]*link, error) {
	msgs, err := c.dump("links", func() *request {
		return newRequest(unix.RTM_GETLINK, 0).add(ifinfomsg(unix.AF_UNSPEC, 0, 0, 0)).attr(unix.IFLA_EXT_MASK, u32(rtextFilterVF))
	}, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	out := make([]*link, 0, len(msgs))
	for _, m := range msgs {
		l, err := decodeLink(m)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// decodeLink decodes an RTM_NEWLINK body.
func decodeLink(m []byte) (*link, error) {
	if len(m) < unix.SizeofIfInfomsg {
		return nil, fmt.Errorf("short link message (%d bytes)", len(m))
	}
	attrs, err := parseAttrs(m[unix.SizeofIfInfomsg:])
	if err != nil {
		return nil, fmt.Errorf("decode link: %w", err)
	}
	l := &link{index: int(int32(native.Uint32(m[4:]))), flags: native.Uint32(m[8:]), kind: "device"}
	for _, a := range attrs {
		switch a.typ {
		case unix.IFLA_IFNAME:
			l.name = cString(a.val)
		case unix.IFLA_IFALIAS:
			l.alias = cString(a.val)
		case unix.IFLA_ADDRESS:
			if strings.Trim(string(a.val), "\x00") != "" { // lo's is all zero: none
				l.mac = mac(append([]byte(nil), a.val...))
			}
		case unix.IFLA_MTU:
			l.mtu = int(attrUint32(a.val))
		case unix.IFLA_LINK:
			l.parent = int(attrUint32(a.val))
		case unix.IFLA_MASTER:
			l.master = int(attrUint32(a.val))
		case unix.IFLA_PROMISCUITY:
			l.promisc = attrUint32(a.val)
		case unix.IFLA_GROUP:
			l.group = attrUint32(a.val)
		case unix.IFLA_LINKINFO:
			if kind := linkKind(a.val); kind != "" {
				l.kind = kind
			}
		}
	}
	return l, nil
}

// linkKind reads IFLA_INFO_KIND out of IFLA_LINKINFO.
func linkKind(linkInfo []byte) string {
	infos, err := parseAttrs(linkInfo)
	if err == nil {
		for _, i := range infos {
			if i.typ == unix.IFLA_INFO_KIND {
				return cString(i.val)
			}
		}
	}
	return ""
}

// listAddrs lists the addresses of a link, with their prefix lengths.
func (c *rtnlConn) listAddrs(index int) ([]netip.Prefix, error) {
	msgs, err := c.dump("addresses", func() *request {
		return newRequest(unix.RTM_GETADDR, 0).add(ifaddrmsg(unix.AF_UNSPEC, 0, 0, 0))
	}, unix.RTM_NEWADDR)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, m := range msgs {
		if len(m) < unix.SizeofIfAddrmsg || int(native.Uint32(m[4:])) != index {
			continue
		}
		if p, ok := decodeAddr(m); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// decodeAddr reads an RTM_NEWADDR body: the local address (the peer's
// on point-to-point links comes as IFA_ADDRESS) and the prefix length.
func decodeAddr(m []byte) (netip.Prefix, bool) {
	attrs, err := parseAttrs(m[unix.SizeofIfAddrmsg:])
	if err != nil {
		return netip.Prefix{}, false
	}
	var local, address netip.Addr
	for _, a := range attrs {
		ip, ok := netip.AddrFromSlice(a.val)
		switch {
		case !ok:
		case a.typ == unix.IFA_LOCAL:
			local = ip
		case a.typ == unix.IFA_ADDRESS:
			address = ip
		}
	}
	if local.IsValid() {
		address = local
	}
	return netip.PrefixFrom(address, int(m[1])), address.IsValid()
}

// kernelRoute is a route of the main table as the kernel lists it.
type kernelRoute struct {
	dst netip.Prefix
	gw  netip.Addr
}

// listRoutes lists the main table's routes out of a link.
func (c *rtnlConn) listRoutes(index int) ([]kernelRoute, error) {
	msgs, err := c.dump("routes", func() *request {
		return newRequest(unix.RTM_GETROUTE, 0).add(make([]byte, unix.SizeofRtMsg))
	}, unix.RTM_NEWROUTE)
	if err != nil {
		return nil, err
	}
	var out []kernelRoute
	for _, m := range msgs {
		if r, ok := decodeRoute(m, index); ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// decodeRoute reads an RTM_NEWROUTE body if the route is in the main table
// and goes out of the link with index.
func decodeRoute(m []byte, index int) (kernelRoute, bool) {
	if len(m) < unix.SizeofRtMsg || native.Uint32(m[8:])&unix.RTM_F_CLONED != 0 {
		return kernelRoute{}, false
	}
	attrs, err := parseAttrs(m[unix.SizeofRtMsg:])
	if err != nil {
		return kernelRoute{}, false
	}
	family, dstLen, table := m[0], int(m[1]), uint32(m[4])
	var r kernelRoute
	oif := 0
	for _, a := range attrs {
		switch a.typ {
		case unix.RTA_DST:
			ip, _ := netip.AddrFromSlice(a.val)
			r.dst = netip.PrefixFrom(ip, dstLen)
		case unix.RTA_GATEWAY:
			r.gw, _ = netip.AddrFromSlice(a.val)
		case unix.RTA_OIF:
			oif = int(attrUint32(a.val))
		case unix.RTA_TABLE:
			table = attrUint32(a.val)
		}
	}
	if !r.dst.IsValid() { // a default route has no RTA_DST
		zero := netip.IPv4Unspecified()
		if family == unix.AF_INET6 {
			zero = netip.IPv6Unspecified()
		}
		r.dst = netip.PrefixFrom(zero, dstLen)
	}
	return r, oif == index && table == unix.RT_TABLE_MAIN
}

// hairpin reports whether a bridge port reflects traffic back out of
// itself (IFLA_BRPORT_MODE), from the bridge's view of its ports.
func (c *rtnlConn) hairpin(index int) (bool, error) {
	msgs, err := c.dump("bridge ports", func() *request {
		return newRequest(unix.RTM_GETLINK, 0).add(ifinfomsg(unix.AF_BRIDGE, 0, 0, 0))
	}, unix.RTM_NEWLINK)
	if err != nil {
		return false, err
	}
	for _, m := range msgs {
		if len(m) < unix.SizeofIfInfomsg || int(int32(native.Uint32(m[4:]))) != index {
			continue
		}
		attrs, err := parseAttrs(m[unix.SizeofIfInfomsg:])
		if err != nil {
			return false, err
		}
		for _, a := range attrs {
			if a.typ != unix.IFLA_PROTINFO {
				continue
			}
			port, err := parseAttrs(a.val)
			if err != nil {
				return false, err
			}
			for _, p := range port {
				if p.typ == unix.IFLA_BRPORT_MODE && len(p.val) > 0 {
					return p.val[0] == 1, nil
				}
			}
		}
	}
	return false, fmt.Errorf("port %d: %w", index, unix.ENODEV)
}

// createBridge creates a bridge, up and with a fixed MAC, optionally
// promiscuous.
func (c *rtnlConn) createBridge(name string, mtu int, hw mac, promisc bool) error {
	flags := uint32(unix.IFF_UP)
	if promisc {
		flags |= unix.IFF_PROMISC
	}
	req := newRequest(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK).add(ifinfomsg(unix.AF_UNSPEC, 0, flags, flags))
	req.attr(unix.IFLA_IFNAME, cstr(name)).attr(unix.IFLA_ADDRESS, hw)
	if mtu > 0 {
		req.attr(unix.IFLA_MTU, u32(uint32(mtu)))
	}
	req.nested(unix.IFLA_LINKINFO, func() { req.attr(unix.IFLA_INFO_KIND, []byte("bridge")) })
	_, err := c.exec(req, 0)
	return err
}
