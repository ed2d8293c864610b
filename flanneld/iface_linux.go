package flanneld

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

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

// IfaceOptions selects the external interface, in upstream's order of
// precedence: Ifaces, then IfaceRegex, then CanReach, then the interface
// of the default route.
type IfaceOptions struct {
	Ifaces     []string // names or IPs, first match wins
	IfaceRegex []string // against names and addresses
	CanReach   string   // an IP: use the interface the route to it takes
	PublicIP   netip.Addr
	PublicIPv6 netip.Addr
	IPv4, IPv6 bool // families that need an address
}

// ErrNoInterface is returned when no interface matches the selection.
var ErrNoInterface = errors.New("no matching interface")

// LookupExtIface finds the external interface through h. It only reads.
func LookupExtIface(h *netlink.Handle, o IfaceOptions) (*ExtIface, error) {
	link, ip, err := selectLink(h, o)
	if err != nil {
		return nil, err
	}
	e := &ExtIface{Name: link.Attrs().Name, Index: link.Attrs().Index, MTU: link.Attrs().MTU}
	addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", e.Name, err)
	}
	for _, a := range addrs {
		p, ok := ipnetPrefix(a.IPNet)
		if !ok {
			continue
		}
		e.Connected = append(e.Connected, p.Masked())
		if a.Scope != unix.RT_SCOPE_UNIVERSE || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if p.Addr().Is4() && !e.IP.IsValid() {
			e.IP = p.Addr()
		}
		if p.Addr().Is6() && !e.IPv6.IsValid() {
			e.IPv6 = p.Addr()
		}
	}
	if ip.IsValid() && ip.Is4() {
		e.IP = ip
	} else if ip.IsValid() {
		e.IPv6 = ip
	}
	e.PublicIP, e.PublicIPv6 = e.IP, e.IPv6
	if o.PublicIP.IsValid() {
		e.PublicIP = o.PublicIP
	}
	if o.PublicIPv6.IsValid() {
		e.PublicIPv6 = o.PublicIPv6
	}
	if o.IPv4 && !e.PublicIP.IsValid() {
		return nil, fmt.Errorf("interface %s has no IPv4 address (and no --public-ip given): %w", e.Name, ErrNoInterface)
	}
	if o.IPv6 && !e.PublicIPv6.IsValid() {
		return nil, fmt.Errorf("interface %s has no global IPv6 address (and no --public-ipv6 given): %w", e.Name, ErrNoInterface)
	}
	if e.MTU == 0 {
		return nil, fmt.Errorf("interface %s reports MTU 0", e.Name)
	}
	return e, nil
}

func selectLink(h *netlink.Handle, o IfaceOptions) (netlink.Link, netip.Addr, error) {
	switch {
	case len(o.Ifaces) > 0:
		for _, spec := range o.Ifaces {
			if ip, err := netip.ParseAddr(spec); err == nil {
				if l, err := linkByAddr(h, ip); err == nil {
					return l, ip, nil
				}
				continue
			}
			if l, err := h.LinkByName(spec); err == nil {
				return l, netip.Addr{}, nil
			}
		}
		return nil, netip.Addr{}, fmt.Errorf("--iface %s: no interface has that name or address: %w", strings.Join(o.Ifaces, ", "), ErrNoInterface)
	case len(o.IfaceRegex) > 0:
		links, err := h.LinkList()
		if err != nil {
			return nil, netip.Addr{}, fmt.Errorf("list interfaces: %w", err)
		}
		for _, expr := range o.IfaceRegex {
			re, err := regexp.Compile(expr)
			if err != nil {
				return nil, netip.Addr{}, fmt.Errorf("--iface-regex %q: %w", expr, err)
			}
			for _, l := range links {
				if l.Attrs().Name == "lo" {
					continue
				}
				if re.MatchString(l.Attrs().Name) {
					return l, netip.Addr{}, nil
				}
				addrs, _ := h.AddrList(l, netlink.FAMILY_ALL)
				for _, a := range addrs {
					if re.MatchString(a.IP.String()) {
						ip, _ := netip.AddrFromSlice(a.IP)
						return l, ip.Unmap(), nil
					}
				}
			}
		}
		return nil, netip.Addr{}, fmt.Errorf("--iface-regex %s: no interface name or address matches: %w", strings.Join(o.IfaceRegex, ", "), ErrNoInterface)
	case o.CanReach != "":
		dst, err := netip.ParseAddr(o.CanReach)
		if err != nil {
			return nil, netip.Addr{}, fmt.Errorf("--iface-can-reach %q: not an IP address", o.CanReach)
		}
		rs, err := h.RouteGet(dst.AsSlice())
		if err != nil || len(rs) == 0 {
			return nil, netip.Addr{}, fmt.Errorf("--iface-can-reach %s: no route: %w (%w)", dst, ErrNoInterface, err)
		}
		l, err := h.LinkByIndex(rs[0].LinkIndex)
		if err != nil {
			return nil, netip.Addr{}, fmt.Errorf("--iface-can-reach %s: %w", dst, err)
		}
		src, _ := netip.AddrFromSlice(rs[0].Src)
		return l, src.Unmap(), nil
	default:
		return defaultRouteLink(h, o)
	}
}

func defaultRouteLink(h *netlink.Handle, o IfaceOptions) (netlink.Link, netip.Addr, error) {
	families := []int{netlink.FAMILY_V4}
	if !o.IPv4 {
		families = []int{netlink.FAMILY_V6}
	}
	for _, fam := range families {
		rs, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, netip.Addr{}, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range rs {
			if (r.Dst == nil || isDefault(r.Dst)) && r.LinkIndex > 0 {
				l, err := h.LinkByIndex(r.LinkIndex)
				if err != nil {
					return nil, netip.Addr{}, fmt.Errorf("find default route interface: %w", err)
				}
				return l, netip.Addr{}, nil
			}
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("no default route to take the interface from; pass --iface, --iface-regex or --iface-can-reach: %w", ErrNoInterface)
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
