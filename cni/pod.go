package cni

import (
	"fmt"
	"net/netip"

	"github.com/nodenet/nodenet/cni/kernel"
	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// loopbackIndex is lo's ifindex in every network namespace.
const loopbackIndex = 1

// familyGateways maps each family in use to the gateway of its first
// allocation.
func familyGateways(allocs []hostlocal.Allocation) (v4, v6 netip.Addr) {
	for _, a := range allocs {
		if a.Address.Addr().Is4() && !v4.IsValid() {
			v4 = a.Gateway
		}
		if a.Address.Addr().Is6() && !v6.IsValid() {
			v6 = a.Gateway
		}
	}
	return v4, v6
}

// podRoutes are the routes ADD installs and reports: the configured ones
// (the flannel network) for each family the pod has an address in, and
// with defaultRoute a default route via the gateway.
func podRoutes(n *network, allocs []hostlocal.Allocation) []*protocol.Route {
	v4, v6 := familyGateways(allocs)
	has := func(dst netip.Addr) bool {
		if dst.Is4() {
			return v4.IsValid()
		}
		return v6.IsValid()
	}
	var out []*protocol.Route
	for _, r := range n.routes {
		if has(r.Dst.Addr()) {
			out = append(out, r)
		}
	}
	if n.defaultRoute {
		if v4.IsValid() {
			out = append(out, &protocol.Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), GW: v4})
		}
		if v6.IsValid() {
			out = append(out, &protocol.Route{Dst: netip.PrefixFrom(netip.IPv6Unspecified(), 0), GW: v6})
		}
	}
	return out
}

// routeGateway is the next hop a route is installed with: its own, or the
// gateway of its family.
func routeGateway(r *protocol.Route, allocs []hostlocal.Allocation) netip.Addr {
	if r.GW.IsValid() {
		return r.GW
	}
	v4, v6 := familyGateways(allocs)
	if r.Dst.Addr().Is4() {
		return v4
	}
	return v6
}

// configurePod brings the pod end up with its addresses and routes, and
// the pod's loopback up, in one netlink batch on a socket opened in the
// pod's namespace (no thread stays switched into it; the DAD sysctl for
// IPv6 is the exception, it has no netlink equivalent).
func configurePod(podNS *kernel.NetNS, ifName string, index int, allocs []hostlocal.Allocation, routes []*protocol.Route) error {
	if _, v6 := familyGateways(allocs); v6.IsValid() {
		if err := podNS.DisableDAD(ifName); err != nil {
			return err
		}
	}
	s, err := podNS.Dial()
	if err != nil {
		return err
	}
	defer s.Close()
	if index == 0 {
		l, err := s.Link(ifName)
		if err != nil {
			return fmt.Errorf("find %s in %s: %w", ifName, podNS.Path(), err)
		}
		index = l.Index
	}
	var b kernel.Batch
	b.SetUp(index, ifName)
	for _, a := range allocs {
		b.AddAddr(index, ifName, a.Address)
	}
	for _, r := range routes {
		b.AddRoute(index, ifName, kernel.Route{Dst: r.Dst, GW: routeGateway(r, allocs), MTU: r.MTU, AdvMSS: r.AdvMSS, Priority: r.Priority, Table: r.Table, Scope: r.Scope})
	}
	b.SetUp(loopbackIndex, "lo")
	return s.Run(&b)
}
