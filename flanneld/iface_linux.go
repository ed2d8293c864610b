package flanneld

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ExtIface is the interface flanneld sends inter-node traffic through.
type ExtIface struct {
	Name  string
	Index int
	MTU   int
	// IP and IPv6 are the interface's own addresses (the vxlan source).
	IP, IPv6 netip.Addr
	// PublicIP and PublicIPv6 are what peers send to: --public-ip, or
	// the interface address.
	PublicIP, PublicIPv6 netip.Addr
	// Connected are the subnets on the interface: a host-gw peer must be
	// inside one of them (same L2 network).
	Connected []netip.Prefix
}

// OnLink reports whether a is in a subnet connected to the interface.
func (e *ExtIface) OnLink(a netip.Addr) bool {
	for _, p := range e.Connected {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// IfaceOptions selects the external interface the way upstream flanneld
// does: every --iface in order, then every --iface-regex in order, then
// --iface-can-reach; the first candidate that yields an interface with the
// addresses the enabled families need wins. Without any of them: the
// interface holding --public-ip, else the interface of the default route.
type IfaceOptions struct {
	Ifaces     []string         // names or IPs
	IfaceRegex []*regexp.Regexp // against addresses first, then names
	CanReach   netip.Addr       // use the interface the route to it takes
	PublicIP   netip.Addr
	PublicIPv6 netip.Addr
	IPv4, IPv6 bool // families that need an address
}

// ErrNoInterface is returned when no interface matches the selection.
var ErrNoInterface = errors.New("no matching interface")

// LookupExtIface finds the external interface through h. It only reads.
func LookupExtIface(h *netlink.Handle, o IfaceOptions) (*ExtIface, error) {
	if !o.IPv4 && !o.IPv6 {
		o.IPv4 = true
	}
	e, err := selectIface(h, o)
	if err != nil {
		return nil, err
	}
	e.PublicIP, e.PublicIPv6 = e.IP, e.IPv6
	if o.PublicIP.IsValid() {
		e.PublicIP = o.PublicIP
	}
	if o.PublicIPv6.IsValid() {
		e.PublicIPv6 = o.PublicIPv6
	}
	return e, nil
}

// selectIface tries the candidates in upstream's order. A candidate that
// names an interface without a usable address is skipped, as upstream
// skips it, rather than failing the whole selection.
func selectIface(h *netlink.Handle, o IfaceOptions) (*ExtIface, error) {
	if len(o.Ifaces) == 0 && len(o.IfaceRegex) == 0 && !o.CanReach.IsValid() {
		pub := o.PublicIP
		if !o.IPv4 {
			pub = o.PublicIPv6
		}
		if pub.IsValid() {
			if l, err := linkByAddr(h, pub); err == nil {
				return completeIface(h, o, l, pub)
			}
			// Upstream gives up here; a --public-ip that is a NAT address
			// held by no interface is legitimate, so fall back to the
			// default route as for no --public-ip at all.
		}
		l, err := defaultRouteLink(h, o)
		if err != nil {
			return nil, err
		}
		return completeIface(h, o, l, netip.Addr{})
	}
	var errs []error
	for _, spec := range o.Ifaces {
		e, err := lookupIfaceSpec(h, o, spec)
		if err == nil {
			return e, nil
		}
		errs = append(errs, fmt.Errorf("--iface %s: %w", spec, err))
	}
	for _, re := range o.IfaceRegex {
		e, err := lookupIfaceRegex(h, o, re)
		if err == nil {
			return e, nil
		}
		errs = append(errs, fmt.Errorf("--iface-regex %s: %w", re, err))
	}
	if o.CanReach.IsValid() {
		e, err := lookupCanReach(h, o)
		if err == nil {
			return e, nil
		}
		errs = append(errs, fmt.Errorf("--iface-can-reach %s: %w", o.CanReach, err))
	}
	return nil, fmt.Errorf("%w: %w", errors.Join(errs...), ErrNoInterface)
}

// lookupIfaceSpec resolves one --iface: an address names the interface
// holding exactly that address (which then is the one used), anything else
// is an interface name.
func lookupIfaceSpec(h *netlink.Handle, o IfaceOptions, spec string) (*ExtIface, error) {
	if ip, err := netip.ParseAddr(spec); err == nil {
		l, err := linkByAddr(h, ip)
		if err != nil {
			return nil, err
		}
		return completeIface(h, o, l, ip)
	}
	l, err := h.LinkByName(spec)
	if err != nil {
		return nil, fmt.Errorf("no interface has that name or address: %w", err)
	}
	return completeIface(h, o, l, netip.Addr{})
}

// lookupIfaceRegex matches the usable addresses of every interface first
// and interface names only when no address matched, as upstream does.
func lookupIfaceRegex(h *netlink.Handle, o IfaceOptions, re *regexp.Regexp) (*ExtIface, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	for _, l := range links {
		if ip, ok := matchAddr(h, o, l, re); ok {
			return completeIface(h, o, l, ip)
		}
	}
	for _, l := range links {
		if re.MatchString(l.Attrs().Name) {
			return completeIface(h, o, l, netip.Addr{})
		}
	}
	return nil, errors.New("no interface name or address matches")
}

// matchAddr returns the first usable address of l that re matches, in the
// family flanneld needs (IPv4 when enabled; in dual stack upstream wants
// both families to match, and the IPv4 one is returned).
func matchAddr(h *netlink.Handle, o IfaceOptions, l netlink.Link, re *regexp.Regexp) (netip.Addr, bool) {
	first := func(fam int) (netip.Addr, bool) {
		for _, a := range usableAddrs(h, l, fam) {
			if re.MatchString(a.String()) {
				return a, true
			}
		}
		return netip.Addr{}, false
	}
	switch {
	case o.IPv4 && o.IPv6:
		v4, ok4 := first(netlink.FAMILY_V4)
		_, ok6 := first(netlink.FAMILY_V6)
		return v4, ok4 && ok6
	case o.IPv4:
		return first(netlink.FAMILY_V4)
	default:
		return first(netlink.FAMILY_V6)
	}
}

// lookupCanReach is `ip route get`: the route's device, and its preferred
// source as the address when the kernel gives one.
func lookupCanReach(h *netlink.Handle, o IfaceOptions) (*ExtIface, error) {
	rs, err := h.RouteGet(o.CanReach.AsSlice())
	if err != nil || len(rs) == 0 {
		return nil, fmt.Errorf("no route (%w)", err)
	}
	l, err := h.LinkByIndex(rs[0].LinkIndex)
	if err != nil {
		return nil, fmt.Errorf("route interface: %w", err)
	}
	src, _ := netip.AddrFromSlice(rs[0].Src)
	return completeIface(h, o, l, src.Unmap())
}

// completeIface fills in the interface's addresses: pinned (from --iface
// IP, a regex match or a route source) where given, else the first usable
// address of each family flanneld needs.
func completeIface(h *netlink.Handle, o IfaceOptions, l netlink.Link, pinned netip.Addr) (*ExtIface, error) {
	e := &ExtIface{Name: l.Attrs().Name, Index: l.Attrs().Index, MTU: l.Attrs().MTU}
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", e.Name, err)
	}
	for _, a := range addrs {
		if p, ok := ipnetPrefix(a.IPNet); ok {
			e.Connected = append(e.Connected, p.Masked())
		}
	}
	if v4 := usableAddrs(h, l, netlink.FAMILY_V4); len(v4) > 0 {
		e.IP = v4[0]
	}
	if v6 := usableAddrs(h, l, netlink.FAMILY_V6); len(v6) > 0 {
		e.IPv6 = v6[0]
	}
	switch {
	case pinned.Is4():
		e.IP = pinned
	case pinned.IsValid():
		e.IPv6 = pinned
	}
	if o.IPv4 && !e.IP.IsValid() {
		return nil, fmt.Errorf("interface %s has no usable IPv4 address", e.Name)
	}
	if o.IPv6 && !e.IPv6.IsValid() {
		return nil, fmt.Errorf("interface %s has no usable IPv6 address", e.Name)
	}
	if e.MTU == 0 {
		return nil, fmt.Errorf("interface %s reports MTU 0", e.Name)
	}
	return e, nil
}

// usableAddrs are the addresses upstream flanneld would use, best first:
// global or link-local unicast (a node network may be 169.254/16 only),
// not deprecated; global before link-local, permanent before dynamic,
// stable before temporary.
func usableAddrs(h *netlink.Handle, l netlink.Link, fam int) []netip.Addr {
	addrs, err := h.AddrList(l, fam)
	if err != nil {
		return nil
	}
	type cand struct {
		ip    netip.Addr
		flags int
	}
	var cs []cand
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if (ip.IsGlobalUnicast() || ip.IsLinkLocalUnicast()) && a.Flags&unix.IFA_F_DEPRECATED == 0 {
			cs = append(cs, cand{ip, a.Flags})
		}
	}
	rank := func(c cand) int {
		r := 0
		if c.ip.IsLinkLocalUnicast() {
			r += 4
		}
		if c.flags&unix.IFA_F_PERMANENT == 0 {
			r += 2
		}
		if c.flags&unix.IFA_F_TEMPORARY != 0 {
			r++
		}
		return r
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return rank(a) - rank(b) })
	out := make([]netip.Addr, len(cs))
	for i, c := range cs {
		out[i] = c.ip
	}
	return out
}

// defaultRouteLink is the device of the first default route in the main
// table (IPv4 unless only IPv6 is enabled).
func defaultRouteLink(h *netlink.Handle, o IfaceOptions) (netlink.Link, error) {
	fam := netlink.FAMILY_V4
	if !o.IPv4 {
		fam = netlink.FAMILY_V6
	}
	rs, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range rs {
		if r.Dst != nil && !isDefault(r.Dst) {
			continue
		}
		if r.LinkIndex <= 0 {
			return nil, fmt.Errorf("default route has no single interface; pass --iface, --iface-regex or --iface-can-reach: %w", ErrNoInterface)
		}
		l, err := h.LinkByIndex(r.LinkIndex)
		if err != nil {
			return nil, fmt.Errorf("find default route interface: %w", err)
		}
		return l, nil
	}
	return nil, fmt.Errorf("no default route to take the interface from; pass --iface, --iface-regex or --iface-can-reach: %w", ErrNoInterface)
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

func linkByAddr(h *netlink.Handle, ip netip.Addr) (netlink.Link, error) {
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if p, ok := ipnetPrefix(a.IPNet); ok && p.Addr() == ip {
			return h.LinkByIndex(a.LinkIndex)
		}
	}
	return nil, fmt.Errorf("no interface has address %s", ip)
}

func ipnetPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}
