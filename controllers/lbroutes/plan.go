package lbroutes

import (
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nodenet/nodenet/routes"
)

// excludeLabel keeps a node out of every external load balancer, as the
// cloud providers' service controllers honour it.
const excludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// target is one desired route and what it is for.
type target struct {
	route   routes.Route
	service string // namespace/name
	node    string
}

// planRoutes works out, without I/O, one route per LoadBalancer address
// inside pools. unserved lists the addresses no node can take, by service.
func planRoutes(svcs []*corev1.Service, nodes []*corev1.Node, eps []*discoveryv1.EndpointSlice, pools []netip.Prefix) (want []target, unserved map[string][]netip.Addr) {
	unserved = map[string][]netip.Addr{}
	svcs = slices.Clone(svcs)
	// By key, so that of two Services publishing one address (a conflict
	// the allocator resolves) the same one wins on every sync.
	slices.SortFunc(svcs, func(a, b *corev1.Service) int { return strings.Compare(key(a), key(b)) })
	local := localEndpointNodes(eps)
	taken := map[netip.Addr]bool{}
	for _, s := range svcs {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		for _, ing := range s.Status.LoadBalancer.Ingress {
			addr, err := netip.ParseAddr(ing.IP)
			if err != nil || taken[addr.Unmap()] || !inPools(pools, addr.Unmap()) {
				continue
			}
			addr = addr.Unmap()
			taken[addr] = true
			serves := func(string) bool { return true }
			if s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
				serves = func(n string) bool { return local[key(s)][n] }
			}
			node, gw, ok := pick(addr, nodes, serves)
			if !ok {
				unserved[key(s)] = append(unserved[key(s)], addr)
				continue
			}
			want = append(want, target{
				route:   routes.Route{Dst: netip.PrefixFrom(addr, addr.BitLen()), Gw: gw},
				service: key(s), node: node,
			})
		}
	}
	return want, unserved
}

func key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

func inPools(pools []netip.Prefix, a netip.Addr) bool {
	for _, p := range pools {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// managed reports whether a route to dst is this controller's to keep.
func managed(pools []netip.Prefix, dst netip.Prefix) bool {
	return dst.IsSingleIP() && inPools(pools, dst.Addr())
}

// localEndpointNodes maps each Service to the nodes with a ready endpoint
// of it.
func localEndpointNodes(eps []*discoveryv1.EndpointSlice) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, sl := range eps {
		svc := sl.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		k := sl.Namespace + "/" + svc
		for _, ep := range sl.Endpoints {
			if ep.NodeName == nil || (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) {
				continue
			}
			if out[k] == nil {
				out[k] = map[string]bool{}
			}
			out[k][*ep.NodeName] = true
		}
	}
	return out
}

// pick chooses the node for addr by rendezvous hashing among the nodes
// that qualify and serve the Service.
func pick(addr netip.Addr, nodes []*corev1.Node, serves func(node string) bool) (string, netip.Addr, bool) {
	var best string
	var bestGw netip.Addr
	var bestScore uint64
	for _, n := range nodes {
		if !serves(n.Name) {
			continue
		}
		gw, ok := eligible(n, addr.Is4())
		if !ok {
			continue
		}
		h := fnv.New64a()
		h.Write(addr.AsSlice())
		h.Write([]byte(n.Name))
		if score := h.Sum64(); best == "" || score > bestScore || (score == bestScore && n.Name < best) {
			best, bestGw, bestScore = n.Name, gw, score
		}
	}
	return best, bestGw, best != ""
}

// eligible returns the address the router reaches n at, if n may carry
// load-balancer traffic.
func eligible(n *corev1.Node, v4 bool) (netip.Addr, bool) {
	if n.DeletionTimestamp != nil {
		return netip.Addr{}, false
	}
	if _, excluded := n.Labels[excludeLabel]; excluded || !ready(n) {
		return netip.Addr{}, false
	}
	for _, a := range n.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if a.Type == corev1.NodeInternalIP && err == nil && ip.Zone() == "" && ip.Unmap().Is4() == v4 {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
