package proxy

import (
	"net/netip"
	"slices"
	"strings"
)

// NodePortAddresses is --nodeport-addresses (parsed by cmd/nodenet): a
// list of CIDRs and/or the word "primary" (the node's primary IPs from its
// Node object). Empty means every local address.
type NodePortAddresses struct {
	CIDRs   []netip.Prefix
	Primary bool
}

// String is the flag's form: the CIDRs, then "primary", comma-separated.
func (n NodePortAddresses) String() string {
	parts := make([]string, 0, len(n.CIDRs)+1)
	for _, p := range n.CIDRs {
		parts = append(parts, p.String())
	}
	if n.Primary {
		parts = append(parts, "primary")
	}
	return strings.Join(parts, ",")
}

// Resolve computes where NodePorts of family f are open. local are the
// node's current interface addresses (any family), nodeIPs its primary IPs
// from the Node object. With no CIDRs of this family and no "primary",
// NodePorts are open on every local address (All).
func (n NodePortAddresses) Resolve(f Family, local, nodeIPs []netip.Addr) NodePorts {
	var cidrs []netip.Prefix
	for _, p := range n.CIDRs {
		if f.Contains(p.Addr()) {
			cidrs = append(cidrs, p)
		}
	}
	if len(cidrs) == 0 && !n.Primary {
		return NodePorts{All: true}
	}
	var out []netip.Addr
	for _, a := range local {
		a = a.Unmap()
		if !f.Contains(a) {
			continue
		}
		for _, p := range cidrs {
			if p.Contains(a) {
				out = append(out, a)
				break
			}
		}
	}
	if n.Primary {
		for _, a := range nodeIPs {
			if f.Contains(a) {
				out = append(out, a.Unmap())
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return NodePorts{Addrs: slices.Compact(out)}
}

// Equal reports whether two resolutions are the same.
func (p NodePorts) Equal(o NodePorts) bool {
	return p.All == o.All && slices.Equal(p.Addrs, o.Addrs)
}
