package proxy

import "slices"

// Selection is the outcome of endpoint selection for one service port: which
// endpoints each kind of traffic may use. Every data plane programs exactly
// these lists, so all modes agree on who gets traffic.
type Selection struct {
	// Cluster endpoints serve traffic under the Cluster policy (internal
	// traffic unless iTP=Local; external traffic unless eTP=Local). Nil when
	// no traffic of the service uses the Cluster policy.
	Cluster []Endpoint
	// Local endpoints serve traffic under a Local policy (only endpoints on
	// this node). Nil when no traffic of the service uses a Local policy.
	Local []Endpoint
	// AllReachable is Cluster ∪ Local (sorted): the endpoints that need
	// per-endpoint state (chains, affinity, conntrack).
	AllReachable []Endpoint
	// UsesCluster / UsesLocal say which lists are in use (an in-use list may
	// be empty: then that traffic is rejected).
	UsesCluster bool
	UsesLocal   bool
}

// InternalEndpoints are the endpoints ClusterIP traffic may reach.
func (s Selection) InternalEndpoints(sp *ServicePort) []Endpoint {
	if sp.InternalPolicyLocal {
		return s.Local
	}
	return s.Cluster
}

// ExternalEndpoints are the endpoints NodePort/ExternalIP/LB traffic may
// reach.
func (s Selection) ExternalEndpoints(sp *ServicePort) []Endpoint {
	if sp.ExternalPolicyLocal {
		return s.Local
	}
	return s.Cluster
}

// SelectEndpoints applies, in this order, kube-proxy's rules:
//   - traffic policies: iTP=Local / eTP=Local traffic only uses endpoints on
//     this node (IsLocal);
//   - readiness with terminating fallback: ready endpoints; if none, the
//     serving+terminating ones (so connections drain during rollouts instead
//     of failing);
//   - topology (Cluster list only): with topology hints on every ready
//     endpoint, only those hinted for this node's zone (or node); without
//     hints but with trafficDistribution PreferClose/PreferSameZone
//     (PreferSameNode), the ready endpoints in this node's zone (on this
//     node) when there are any.
func SelectEndpoints(sp *ServicePort, node NodeInfo) Selection {
	var sel Selection
	sel.UsesCluster = !sp.InternalPolicyLocal || (sp.ExternallyAccessible() && !sp.ExternalPolicyLocal)
	sel.UsesLocal = sp.InternalPolicyLocal || (sp.ExternallyAccessible() && sp.ExternalPolicyLocal)

	if sel.UsesCluster {
		ready := filter(sp.Endpoints, func(e Endpoint) bool { return e.Ready })
		if len(ready) > 0 {
			sel.Cluster = topologyFilter(ready, sp.TrafficDistribution, node)
		} else {
			sel.Cluster = filter(sp.Endpoints, func(e Endpoint) bool { return e.Serving && e.Terminating })
		}
		if sel.Cluster == nil {
			sel.Cluster = []Endpoint{}
		}
	}
	if sel.UsesLocal {
		sel.Local = filter(sp.Endpoints, func(e Endpoint) bool { return e.IsLocal && e.Ready })
		if len(sel.Local) == 0 {
			sel.Local = filter(sp.Endpoints, func(e Endpoint) bool { return e.IsLocal && e.Serving && e.Terminating })
		}
		if sel.Local == nil {
			sel.Local = []Endpoint{}
		}
	}
	sel.AllReachable = union(sel.Cluster, sel.Local)
	return sel
}

// filter returns the endpoints of eps that keep accepts, in order. When it
// accepts all of them (the common case: every endpoint ready, no topology)
// the result is eps itself, clipped: a Selection's lists share the service
// port's endpoints instead of holding copies of them (at 10,000 services
// the copies were a tenth of the proxy's heap). Every list of a Selection is
// read-only, like the ServicePort it belongs to.
func filter(eps []Endpoint, keep func(Endpoint) bool) []Endpoint {
	n := 0
	for _, e := range eps {
		if keep(e) {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(eps):
		return slices.Clip(eps)
	}
	out := make([]Endpoint, 0, n)
	for _, e := range eps {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// union is a ∪ b by address:port, sorted; a and b are sorted (filtered
// from a service port's sorted endpoints), so when one is empty the other
// is the answer, shared rather than copied (see filter).
func union(a, b []Endpoint) []Endpoint {
	switch {
	case len(b) == 0:
		return slices.Clip(a)
	case len(a) == 0:
		return slices.Clip(b)
	}
	out := slices.Clone(a)
	for _, e := range b {
		if !slices.ContainsFunc(out, func(x Endpoint) bool { return x.AddrPort() == e.AddrPort() }) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, compareEndpoints)
	return out
}

func compareEndpoints(a, b Endpoint) int {
	if c := a.IP.Compare(b.IP); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

// topologyFilter narrows ready endpoints to this node's zone/node when the
// hints or the traffic distribution ask for it and doing so leaves at least
// one endpoint; otherwise it returns ready unchanged.
func topologyFilter(ready []Endpoint, dist string, node NodeInfo) []Endpoint {
	allHinted := true
	for _, e := range ready {
		if len(e.ZoneHints) == 0 && len(e.NodeHints) == 0 {
			allHinted = false
			break
		}
	}
	if allHinted {
		if dist == "PreferSameNode" && node.Name != "" {
			if out := filter(ready, func(e Endpoint) bool { return slices.Contains(e.NodeHints, node.Name) }); len(out) > 0 {
				return out
			}
		}
		if node.Zone != "" {
			if out := filter(ready, func(e Endpoint) bool { return slices.Contains(e.ZoneHints, node.Zone) }); len(out) > 0 {
				return out
			}
		}
		return ready
	}
	switch dist {
	case "PreferSameNode":
		if out := filter(ready, func(e Endpoint) bool { return e.IsLocal }); len(out) > 0 {
			return out
		}
		fallthrough
	case "PreferClose", "PreferSameZone":
		if node.Zone != "" {
			if out := filter(ready, func(e Endpoint) bool { return e.Zone == node.Zone }); len(out) > 0 {
				return out
			}
		}
	}
	return ready
}
