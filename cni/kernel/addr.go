package kernel

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nlmsg"
)

// ifaddrmsg is the fixed header of address messages.
func ifaddrmsg(family, prefixLen, flags uint8, index int) []byte {
	b := make([]byte, unix.SizeofIfAddrmsg)
	b[0], b[1], b[2] = family, prefixLen, flags
	native.PutUint32(b[4:], uint32(index))
	return b
}

// AddAddr adds addr (address and prefix length) to a link. One the link
// has already is EEXIST.
func (c *Conn) AddAddr(index int, addr netip.Prefix) error {
	var w nlmsg.Writer
	addAddr(&w, index, addr)
	_, err := c.exec(&w, 0)
	return err
}

// addAddr writes the request adding an address; IPv6 ones skip DAD, and
// IPv4 ones get the broadcast address, as iproute2 and the netlink library
// do.
func addAddr(w *nlmsg.Writer, index int, addr netip.Prefix) {
	ip := addr.Addr()
	w.Begin(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	if ip.Is6() {
		w.Fixed(ifaddrmsg(unix.AF_INET6, uint8(addr.Bits()), unix.IFA_F_NODAD, index))
	} else {
		w.Fixed(ifaddrmsg(unix.AF_INET, uint8(addr.Bits()), 0, index))
	}
	w.Attr(unix.IFA_LOCAL, ip.AsSlice())
	w.Attr(unix.IFA_ADDRESS, ip.AsSlice())
	if ip.Is4() && addr.Bits() < 31 {
		w.Attr(unix.IFA_BROADCAST, broadcast(addr).AsSlice())
	}
}

// DelAddr removes an address from a link; one it does not have is
// EADDRNOTAVAIL.
func (c *Conn) DelAddr(index int, p netip.Prefix) error {
	family := uint8(unix.AF_INET)
	if p.Addr().Is6() {
		family = unix.AF_INET6
	}
	var w nlmsg.Writer
	w.Begin(unix.RTM_DELADDR, unix.NLM_F_ACK)
	w.Fixed(ifaddrmsg(family, uint8(p.Bits()), 0, index))
	w.Attr(unix.IFA_LOCAL, p.Addr().AsSlice())
	w.Attr(unix.IFA_ADDRESS, p.Addr().AsSlice())
	_, err := c.exec(&w, 0)
	return err
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := ^uint32(0) >> p.Bits()
	v := binary.BigEndian.Uint32(b[:]) | host
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// Addrs lists the addresses of a link, with their prefix lengths.
func (c *Conn) Addrs(index int) ([]netip.Prefix, error) {
	msgs, err := c.dump("addresses", dumpRequest(unix.RTM_GETADDR, ifaddrmsg(unix.AF_UNSPEC, 0, 0, 0)), unix.RTM_NEWADDR)
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
	attrs, err := nlmsg.ParseAttrs(m[unix.SizeofIfAddrmsg:])
	if err != nil {
		return netip.Prefix{}, false
	}
	var local, address netip.Addr
	for _, a := range attrs {
		ip, ok := netip.AddrFromSlice(a.Value)
		switch {
		case !ok:
		case a.Type == unix.IFA_LOCAL:
			local = ip
		case a.Type == unix.IFA_ADDRESS:
			address = ip
		}
	}
	if local.IsValid() {
		address = local
	}
	return netip.PrefixFrom(address, int(m[1])), address.IsValid()
}
