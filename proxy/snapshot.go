package proxy

import (
	"log/slog"
	"maps"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ZoneLabel is the node label topology uses.
const ZoneLabel = v1.LabelTopologyZone

// nodeInfo extracts what a snapshot of family f needs from the Node.
func nodeInfo(name string, node *v1.Node, f Family) NodeInfo {
	ni := NodeInfo{Name: name}
	if node == nil {
		return ni
	}
	ni.Labels = node.Labels
	ni.Zone = node.Labels[ZoneLabel]
	for _, typ := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type != typ {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil && f.Contains(ip) {
				ni.IPs = append(ni.IPs, ip.Unmap())
			}
		}
	}
	return ni
}

// familyState is the per-family index the builder keeps between syncs: which
// service ports each service contributed, so a change replaces exactly them.
type familyState struct {
	byService map[types.NamespacedName][]*ServicePort
	// noLocal holds the ports whose Local-policy traffic has no endpoint
	// (noLocalInternal|noLocalExternal bits), kept up to date by
	// countNoLocal; noLocalCount is the number of ports per bit.
	noLocal      map[ServicePortName]uint8
	noLocalCount [2]int
}

// buildInput is everything one snapshot build needs.
type buildInput struct {
	family        Family
	node          NodeInfo
	nodePorts     NodePorts
	clusterCIDRs  []netip.Prefix
	masqueradeAll bool
	prev          *Snapshot // nil on the first build
	changes       changes
	reselectAll   bool // node changed: redo endpoint selection everywhere
}

// buildSnapshot folds changes into the previous snapshot. It returns the new
// snapshot, the service ports the changes touched (before and after) and
// the invalid-input errors it skipped.
func (st *familyState) buildSnapshot(in buildInput, log *slog.Logger) (*Snapshot, map[ServicePortName]struct{}, []error) {
	snap := &Snapshot{
		Family:        in.family,
		Node:          in.node,
		ClusterCIDRs:  in.clusterCIDRs,
		MasqueradeAll: in.masqueradeAll,
		NodePorts:     in.nodePorts,
	}
	if in.prev != nil {
		snap.Services = maps.Clone(in.prev.Services)
	} else {
		snap.Services = map[ServicePortName]*ServicePort{}
	}
	var errs []error
	touched := map[ServicePortName]struct{}{}
	for n, pc := range in.changes.services {
		for _, old := range st.byService[n] {
			delete(snap.Services, old.Name)
			touched[old.Name] = struct{}{}
		}
		delete(st.byService, n)
		if pc.svc == nil {
			continue
		}
		sps, e := ServicePortsFor(pc.svc, in.family)
		errs = append(errs, e...)
		errs = append(errs, EndpointsFor(sps, pc.slices, in.family, in.node.Name)...)
		var kept []*ServicePort
		for _, sp := range sps {
			if _, dup := snap.Services[sp.Name]; dup {
				errs = append(errs, invalid(InvalidService, "service %s: duplicate port %s", n, sp.Name))
				continue
			}
			sp.Selected = SelectEndpoints(sp, in.node)
			snap.Services[sp.Name] = sp
			touched[sp.Name] = struct{}{}
			kept = append(kept, sp)
		}
		if len(kept) > 0 {
			st.byService[n] = kept
		}
	}
	if in.reselectAll {
		// Node zone/name changes alter selection of every service: copy the
		// ports so the previous snapshot stays untouched.
		for n, sps := range st.byService {
			if _, done := in.changes.services[n]; done {
				continue
			}
			for i, sp := range sps {
				cp := *sp
				cp.Selected = SelectEndpoints(&cp, in.node)
				sps[i] = &cp
				snap.Services[cp.Name] = &cp
				touched[cp.Name] = struct{}{}
			}
		}
	}
	for _, err := range errs {
		log.Warn("skipping input the proxy cannot program", "family", in.family, "err", err)
	}
	return snap, touched, errs
}

// changedNames lists the services of a change set in a stable order (logs).
func changedNames(c changes) []types.NamespacedName {
	out := slices.Collect(maps.Keys(c.services))
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return cmpStr(a.String(), b.String()) })
	return out
}
