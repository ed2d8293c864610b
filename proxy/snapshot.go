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
	// services is the one live map every snapshot of the family shares,
	// changed in place by each build: copying it per sync made every
	// EndpointSlice change cost O(services) in time and garbage. A data
	// plane reads snap.Services only during its Sync.
	services map[ServicePortName]*ServicePort
	// was holds, for each port changed since the family's last successful
	// sync, the port as that sync programmed it (nil: it did not exist);
	// cleared when a sync succeeds, so after a failed one it still spans
	// every change the kernel has not seen. staleFlowsOf reads it: any
	// protocol's untranslated flows go stale when a port gains endpoints,
	// UDP's also when it loses one.
	was map[ServicePortName]*ServicePort
	// healthChecked are the ports with a healthCheckNodePort and
	// externalTrafficPolicy Local, kept up to date per build so the health
	// check servers are derived without scanning every service.
	healthChecked map[ServicePortName]*ServicePort
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
	changes       changes
	reselectAll   bool // node changed: redo endpoint selection everywhere
}

// buildSnapshot folds changes into the family's live service map (the
// previous build's) and returns a snapshot of it, the service ports the
// changes touched (before and after) and the invalid-input errors it
// skipped. Its cost is that of the changes, not of the whole map.
func (st *familyState) buildSnapshot(in buildInput, log *slog.Logger) (*Snapshot, map[ServicePortName]struct{}, []error) {
	if st.services == nil {
		// Sized for the first build, which holds every service: growing a
		// map of thousands entry by entry was a third of a cold sync.
		st.services = make(map[ServicePortName]*ServicePort, len(in.changes.services))
	}
	snap := &Snapshot{
		Family:        in.family,
		Node:          in.node,
		ClusterCIDRs:  in.clusterCIDRs,
		MasqueradeAll: in.masqueradeAll,
		NodePorts:     in.nodePorts,
		Services:      st.services,
	}
	var errs []error
	touched := make(map[ServicePortName]struct{}, len(in.changes.services))
	for n, pc := range in.changes.services {
		for _, old := range st.byService[n] {
			st.set(old.Name, nil)
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
			st.set(sp.Name, sp)
			touched[sp.Name] = struct{}{}
			kept = append(kept, sp)
		}
		if len(kept) > 0 {
			st.byService[n] = kept
		}
	}
	if in.reselectAll {
		// Node zone/name changes alter selection of every service: copy the
		// ports, so the ones the last sync programmed (in was) stay as they
		// were.
		for n, sps := range st.byService {
			if _, done := in.changes.services[n]; done {
				continue
			}
			for i, sp := range sps {
				cp := *sp
				cp.Selected = SelectEndpoints(&cp, in.node)
				sps[i] = &cp
				st.set(cp.Name, &cp)
				touched[cp.Name] = struct{}{}
			}
		}
	}
	for _, err := range errs {
		log.Warn("skipping input the proxy cannot program", "family", in.family, "err", err)
	}
	return snap, touched, errs
}

// set puts sp (nil: removes it) under name in the live map, first noting
// in was what the last successful sync programmed there, and keeps
// healthChecked in step.
func (st *familyState) set(name ServicePortName, sp *ServicePort) {
	if st.was == nil {
		st.was = map[ServicePortName]*ServicePort{}
	}
	if _, noted := st.was[name]; !noted {
		st.was[name] = st.services[name]
	}
	if sp == nil {
		delete(st.services, name)
	} else {
		st.services[name] = sp
	}
	if sp != nil && sp.HealthCheckNodePort != 0 && sp.ExternalPolicyLocal {
		if st.healthChecked == nil {
			st.healthChecked = map[ServicePortName]*ServicePort{}
		}
		st.healthChecked[name] = sp
	} else {
		delete(st.healthChecked, name)
	}
}

// changedNames lists the services of a change set in a stable order (logs).
func changedNames(c changes) []types.NamespacedName {
	out := slices.Collect(maps.Keys(c.services))
	slices.SortFunc(out, func(a, b types.NamespacedName) int { return cmpStr(a.String(), b.String()) })
	return out
}
