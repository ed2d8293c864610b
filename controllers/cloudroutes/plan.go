package cloudroutes

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/routes"
)

// plan is what the nodes ask of the route table, worked out without I/O.
type plan struct {
	desired []routes.Route
	// node owning each desired destination, for events and conditions.
	owner map[netip.Prefix]*corev1.Node
	// complete lists nodes whose every managed podCIDR gets a route: only
	// those may be declared network-available.
	complete []*corev1.Node
	// skipped explains each managed podCIDR that gets no route.
	skipped map[podCIDRKey]string
}

type podCIDRKey struct{ node, podCIDR string }

func planRoutes(nodes []*corev1.Node, cfg config) plan {
	nodes = slices.Clone(nodes)
	// First come by name wins a podCIDR two nodes claim: deterministic, so
	// the route does not flap between them from one sync to the next.
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	p := plan{owner: map[netip.Prefix]*corev1.Node{}, skipped: map[podCIDRKey]string{}}
	for _, n := range nodes {
		wanted, got := 0, 0
		for _, s := range podCIDRs(n) {
			dst, err := netip.ParsePrefix(s)
			if err != nil {
				// The API server validates podCIDRs; this is a foreign one.
				p.skipped[podCIDRKey{n.Name, s}] = fmt.Sprintf("invalid podCIDR: %v", err)
				wanted++
				continue
			}
			dst = dst.Masked()
			if !cfg.managed(dst) {
				continue
			}
			wanted++
			gw, ok := internalIP(n, dst.Addr().Is4())
			if !ok {
				p.skipped[podCIDRKey{n.Name, s}] = fmt.Sprintf("node has no %s InternalIP", familyName(dst))
				continue
			}
			if other, taken := p.owner[dst]; taken {
				p.skipped[podCIDRKey{n.Name, s}] = fmt.Sprintf("podCIDR is also node %s's, which keeps the route", other.Name)
				continue
			}
			p.owner[dst] = n
			p.desired = append(p.desired, routes.Route{Dst: dst, Gw: gw})
			got++
		}
		if wanted > 0 && got == wanted {
			p.complete = append(p.complete, n)
		}
	}
	return p
}

func podCIDRs(n *corev1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}

// internalIP returns the node's first InternalIP of the family, the
// address the VPC router can reach it at.
func internalIP(n *corev1.Node, v4 bool) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || ip.Zone() != "" {
			continue
		}
		if ip = ip.Unmap(); ip.Is4() == v4 {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func familyName(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}
