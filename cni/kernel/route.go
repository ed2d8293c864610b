package kernel

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nlmsg"
)

// Route is a route to add out of a link (Batch.AddRoute). GW, when valid,
// is the next hop; the optional fields are those of a CNI route.
type Route struct {
	Dst      netip.Prefix
	GW       netip.Addr
	MTU      int
	AdvMSS   int
	Priority int
	// Table is the routing table (nil: main).
	Table *int
	// Scope is the route's scope (nil: universe).
	Scope *int
}

// rtmsg is the fixed header of route messages (unicast, boot protocol).
func rtmsg(family, dstLen, table, scope uint8) []byte {
	b := make([]byte, unix.SizeofRtMsg)
	b[0], b[1], b[4], b[5], b[6], b[7] = family, dstLen, table, unix.RTPROT_BOOT, scope, unix.RTN_UNICAST
	return b
}

// addRoute writes the request adding r out of link index.
func addRoute(w *nlmsg.Writer, index int, r Route) {
	dst := r.Dst
	family := uint8(unix.AF_INET)
	if dst.Addr().Is6() {
		family = unix.AF_INET6
	}
	var scope uint8
	if r.Scope != nil {
		scope = uint8(*r.Scope)
	}
	table := unix.RT_TABLE_MAIN
	if r.Table != nil {
		table = *r.Table
	}
	hdrTable := uint8(unix.RT_TABLE_UNSPEC)
	if table < 256 {
		hdrTable = uint8(table)
	}
	w.Begin(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	w.Fixed(rtmsg(family, uint8(dst.Bits()), hdrTable, scope))
	if dst.Bits() > 0 {
		w.Attr(unix.RTA_DST, dst.Addr().AsSlice())
	}
	if table >= 256 {
		w.Uint32(unix.RTA_TABLE, uint32(table))
	}
	if r.GW.IsValid() {
		w.Attr(unix.RTA_GATEWAY, r.GW.Unmap().AsSlice())
	}
	w.Uint32(unix.RTA_OIF, uint32(index))
	if r.Priority > 0 {
		w.Uint32(unix.RTA_PRIORITY, uint32(r.Priority))
	}
	if r.MTU > 0 || r.AdvMSS > 0 {
		metrics := w.Nest(unix.RTA_METRICS)
		if r.MTU > 0 {
			w.Uint32(unix.RTAX_MTU, uint32(r.MTU))
		}
		if r.AdvMSS > 0 {
			w.Uint32(unix.RTAX_ADVMSS, uint32(r.AdvMSS))
		}
		w.EndNest(metrics)
	}
}

// MainRoute is a route of the main table as the kernel lists it.
type MainRoute struct {
	Dst netip.Prefix
	GW  netip.Addr
}

// Routes lists the main table's routes out of a link.
func (c *Conn) Routes(index int) ([]MainRoute, error) {
	msgs, err := c.dump("routes", dumpRequest(unix.RTM_GETROUTE, make([]byte, unix.SizeofRtMsg)), unix.RTM_NEWROUTE)
	if err != nil {
		return nil, err
	}
	var out []MainRoute
	for _, m := range msgs {
		if r, ok := decodeRoute(m, index); ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// decodeRoute reads an RTM_NEWROUTE body if the route is in the main table
// and goes out of the link with index.
func decodeRoute(m []byte, index int) (MainRoute, bool) {
	if len(m) < unix.SizeofRtMsg || native.Uint32(m[8:])&unix.RTM_F_CLONED != 0 {
		return MainRoute{}, false
	}
	attrs, err := nlmsg.ParseAttrs(m[unix.SizeofRtMsg:])
	if err != nil {
		return MainRoute{}, false
	}
	family, dstLen, table := m[0], int(m[1]), uint32(m[4])
	var r MainRoute
	oif := 0
	for _, a := range attrs {
		switch a.Type {
		case unix.RTA_DST:
			ip, _ := netip.AddrFromSlice(a.Value)
			r.Dst = netip.PrefixFrom(ip, dstLen)
		case unix.RTA_GATEWAY:
			r.GW, _ = netip.AddrFromSlice(a.Value)
		case unix.RTA_OIF:
			oif = int(nlmsg.Uint32(a.Value))
		case unix.RTA_TABLE:
			table = nlmsg.Uint32(a.Value)
		}
	}
	if !r.Dst.IsValid() { // a default route has no RTA_DST
		zero := netip.IPv4Unspecified()
		if family == unix.AF_INET6 {
			zero = netip.IPv6Unspecified()
		}
		r.Dst = netip.PrefixFrom(zero, dstLen)
	}
	return r, oif == index && table == unix.RT_TABLE_MAIN
}
