package cni

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/cni/kernel"
)

// ensureBridge makes sure the bridge exists, is up, and carries the
// gateway addresses. Concurrent ADDs race to create it; EEXIST means
// another one won, which is fine.
func ensureBridge(hc *kernel.Conn, n *network, gateways []netip.Prefix) (*kernel.Link, error) {
	br, err := hc.Link(n.bridge)
	if kernel.IsNotFound(err) {
		// A fixed MAC keeps the bridge's address from following its
		// lowest-numbered port, which changes as pods come and go and
		// invalidates every pod's neighbour entry for the gateway.
		err = hc.CreateBridge(n.bridge, n.mtu, bridgeMAC(gateways), n.promisc)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create bridge %s: %w", n.bridge, err)
		}
		br, err = hc.Link(n.bridge)
	}
	if err != nil {
		return nil, fmt.Errorf("look up bridge %s: %w", n.bridge, err)
	}
	if br.Kind != "bridge" {
		return nil, fmt.Errorf("%s exists but is a %s, not a bridge", n.bridge, br.Kind)
	}
	if !br.Up() {
		if err := hc.SetFlags(br.Index, unix.IFF_UP, unix.IFF_UP); err != nil {
			return nil, fmt.Errorf("set bridge %s up: %w", n.bridge, err)
		}
	}
	if n.promisc && br.Promisc == 0 {
		if err := hc.SetFlags(br.Index, unix.IFF_PROMISC, unix.IFF_PROMISC); err != nil {
			return nil, fmt.Errorf("set bridge %s promiscuous: %w", n.bridge, err)
		}
	}
	if n.isGateway {
		if err := ensureGatewayAddrs(hc, br, gateways, n.forceAddress); err != nil {
			return nil, err
		}
	}
	return br, nil
}

// bridgeMAC derives a locally administered unicast MAC from the first
// gateway, so it is stable across restarts and unique per node subnet.
func bridgeMAC(gateways []netip.Prefix) kernel.MAC {
	m := kernel.MAC{0x0a, 0x58, 0, 0, 0, 0}
	if len(gateways) > 0 {
		b := gateways[0].Addr().AsSlice()
		copy(m[2:], b[len(b)-4:])
	}
	return m
}

// conflictingAddrs returns the bridge addresses that stand in the way of
// the gateways: any other IPv4 address (a node has one pod subnet per
// family, so a different one means the subnet moved), and IPv6 addresses
// that overlap a gateway's subnet. It also reports the gateways missing.
func conflictingAddrs(addrs []netip.Prefix, gateways []netip.Prefix) (conflicts, missing []netip.Prefix) {
	present := map[netip.Prefix]bool{}
	for _, p := range addrs {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits())
		if p.Addr().IsLinkLocalUnicast() {
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
				conflicts = append(conflicts, p)
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
func ensureGatewayAddrs(hc *kernel.Conn, br *kernel.Link, gateways []netip.Prefix, force bool) error {
	var added []netip.Prefix
	for _, gw := range gateways {
		err := hc.AddAddr(br.Index, gw)
		switch {
		case err == nil:
			added = append(added, gw)
		case !errors.Is(err, unix.EEXIST):
			return fmt.Errorf("add gateway %s to %s: %w", gw, br.Name, err)
		}
	}
	if len(added) == 0 {
		return nil
	}
	addrs, err := hc.Addrs(br.Index)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", br.Name, err)
	}
	conflicts, _ := conflictingAddrs(addrs, gateways)
	for _, a := range conflicts {
		if !force {
			for _, gw := range added {
				hc.DelAddr(br.Index, gw)
			}
			return fmt.Errorf("bridge %s has address %s, want %v (the node's pod subnet changed? set forceAddress to replace it)", br.Name, a, gateways)
		}
		if err := hc.DelAddr(br.Index, a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("remove address %s from %s: %w", a, br.Name, err)
		}
	}
	return nil
}

// checkBridge is STATUS's view: could ADD set the bridge up?
func checkBridge(hc *kernel.Conn, n *network, gateways []netip.Prefix) error {
	br, err := hc.Link(n.bridge)
	if kernel.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up bridge %s: %w", n.bridge, err)
	}
	if br.Kind != "bridge" {
		return fmt.Errorf("%s exists but is a %s, not a bridge", n.bridge, br.Kind)
	}
	if !n.isGateway || n.forceAddress {
		return nil
	}
	addrs, err := hc.Addrs(br.Index)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", n.bridge, err)
	}
	if conflicts, _ := conflictingAddrs(addrs, gateways); len(conflicts) > 0 {
		return fmt.Errorf("bridge %s has address %s, want %v", n.bridge, conflicts[0], gateways)
	}
	return nil
}
