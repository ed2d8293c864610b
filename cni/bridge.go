package cni

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// ensureBridge makes sure the bridge exists, is up, and carries the
// gateway addresses. Concurrent ADDs race to create it; EEXIST means
// another one won, which is fine.
func ensureBridge(h *netlink.Handle, hc *rtnlConn, n *network, gateways []netip.Prefix) (netlink.Link, error) {
	lookup := func() (netlink.Link, error) {
		l, err := hc.getLink(n.bridge, 0)
		if errors.Is(err, unix.EINVAL) {
			// Kernels that cannot look links up by name: the library
			// knows how to cope.
			return h.LinkByName(n.bridge)
		}
		return l, err
	}
	br, err := lookup()
	if isLinkNotFound(err) {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU, la.Flags = n.bridge, n.mtu, net.FlagUp
		// A fixed MAC keeps the bridge's address from following its
		// lowest-numbered port, which changes as pods come and go and
		// invalidates every pod's neighbour entry for the gateway.
		la.HardwareAddr = bridgeMAC(gateways)
		if n.promisc {
			la.Promisc = 1
		}
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create bridge %s: %w", n.bridge, err)
		}
		br, err = lookup()
	}
	if err != nil {
		return nil, fmt.Errorf("look up bridge %s: %w", n.bridge, err)
	}
	if br.Type() != "bridge" {
		return nil, fmt.Errorf("%s exists but is a %s, not a bridge", n.bridge, br.Type())
	}
	if br.Attrs().Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(br); err != nil {
			return nil, fmt.Errorf("set bridge %s up: %w", n.bridge, err)
		}
	}
	if n.promisc && br.Attrs().Promisc == 0 {
		if err := h.SetPromiscOn(br); err != nil {
			return nil, fmt.Errorf("set bridge %s promiscuous: %w", n.bridge, err)
		}
	}
	if n.isGateway {
		if err := ensureGatewayAddrs(h, hc, br, gateways, n.forceAddress); err != nil {
			return nil, err
		}
	}
	return br, nil
}

// bridgeMAC derives a locally administered unicast MAC from the first
// gateway, so it is stable across restarts and unique per node subnet.
func bridgeMAC(gateways []netip.Prefix) net.HardwareAddr {
	mac := net.HardwareAddr{0x0a, 0x58, 0, 0, 0, 0}
	if len(gateways) > 0 {
		b := gateways[0].Addr().AsSlice()
		copy(mac[2:], b[len(b)-4:])
	}
	return mac
}

// conflictingAddrs returns the bridge addresses that stand in the way of
// the gateways: any other IPv4 address (a node has one pod subnet per
// family, so a different one means the subnet moved), and IPv6 addresses
// that overlap a gateway's subnet. It also reports the gateways missing.
func conflictingAddrs(addrs []netlink.Addr, gateways []netip.Prefix) (conflicts []netlink.Addr, missing []netip.Prefix) {
	present := map[netip.Prefix]bool{}
	for _, a := range addrs {
		p, ok := ipNetToPrefix(*a.IPNet)
		if !ok || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		if slices.Contains(gateways, p) {
			present[p] = true
			continue
		}
		for _, gw := range gateways {
			if p.Addr().Is4() != gw.Addr().Is4() {
				continue
			}
			if gw.Addr().Is4() || p.Overlaps(gw) {
				conflicts = append(conflicts, a)
				break
			}
		}
	}
	for _, gw := range gateways {
		if !present[gw] {
			missing = append(missing, gw)
		}
	}
	return conflicts, missing
}

// ensureGatewayAddrs adds the gateway addresses to the bridge. The usual
// answer is EEXIST (the bridge has them since its first pod), and then
// that is all. Only when one was missing — a new bridge, or a node whose
// pod subnet changed — does it look for addresses in the way, and removes
// them with force or else takes its own addition back and fails.
func ensureGatewayAddrs(h *netlink.Handle, hc *rtnlConn, br netlink.Link, gateways []netip.Prefix, force bool) error {
	var added []netip.Prefix
	for _, gw := range gateways {
		// The request netlink.Handle.AddrAdd would send.
		_, err := hc.exec(addrRequest(br.Attrs().Index, hostlocal.Allocation{Address: gw}), 0)
		switch {
		case err == nil:
			added = append(added, gw)
		case !errors.Is(err, unix.EEXIST):
			return fmt.Errorf("add gateway %s to %s: %w", gw, br.Attrs().Name, err)
		}
	}
	if len(added) == 0 {
		return nil
	}
	addrs, err := dump("addresses of "+br.Attrs().Name, func() ([]netlink.Addr, error) { return h.AddrList(br, netlink.FAMILY_ALL) })
	if err != nil {
		return err
	}
	conflicts, _ := conflictingAddrs(addrs, gateways)
	for _, a := range conflicts {
		if !force {
			for _, gw := range added {
				ipn := prefixToIPNet(gw)
				h.AddrDel(br, &netlink.Addr{IPNet: &ipn})
			}
			return fmt.Errorf("bridge %s has address %s, want %v (the node's pod subnet changed? set forceAddress to replace it)", br.Attrs().Name, a.IPNet, gateways)
		}
		if err := h.AddrDel(br, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("remove address %s from %s: %w", a.IPNet, br.Attrs().Name, err)
		}
	}
	return nil
}

// checkBridge is STATUS's view: could ADD set the bridge up?
func checkBridge(h *netlink.Handle, n *network, gateways []netip.Prefix) error {
	br, err := h.LinkByName(n.bridge)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up bridge %s: %w", n.bridge, err)
	}
	if br.Type() != "bridge" {
		return fmt.Errorf("%s exists but is a %s, not a bridge", n.bridge, br.Type())
	}
	if !n.isGateway || n.forceAddress {
		return nil
	}
	addrs, err := dump("addresses of "+n.bridge, func() ([]netlink.Addr, error) { return h.AddrList(br, netlink.FAMILY_ALL) })
	if err != nil {
		return err
	}
	if conflicts, _ := conflictingAddrs(addrs, gateways); len(conflicts) > 0 {
		return fmt.Errorf("bridge %s has address %s, want %v", n.bridge, conflicts[0].IPNet, gateways)
	}
	return nil
}

// enableForwarding turns on routing for the families in use, as a gateway
// bridge needs. It writes only when needed: the value is per namespace
// and shared with everything else on the node.
func enableForwarding(v4, v6 bool) error {
	for _, f := range []struct {
		on   bool
		name string
	}{{v4, "net/ipv4/ip_forward"}, {v6, "net/ipv6/conf/all/forwarding"}} {
		if !f.on {
			continue
		}
		cur, err := sysctl.Sysctl(f.name)
		if err == nil && cur == "1" {
			continue
		}
		if _, err := sysctl.Sysctl(f.name, "1"); err != nil {
			return fmt.Errorf("enable %s: %w", f.name, err)
		}
	}
	return nil
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return err != nil && (errors.As(err, &nf) || errors.Is(err, unix.ENODEV))
}
