package ipvs

import (
	"net/netip"
	"slices"
	"time"

	"github.com/nodenet/nodenet/proxy"
)

// entry is one entry point of a service port: a virtual server when it
// has destinations, a refusal when it has none.
type entry struct {
	svc   Service
	dests []Destination
	// external: reached from outside the cluster (NodePort, externalIP,
	// LB IP); masqueraded always unless eTP=Local.
	external bool
	// masq: external traffic here is masqueraded (eTP=Cluster).
	masq bool
	// sourceRanges guard an LB IP (loadBalancerSourceRanges).
	sourceRanges []netip.Prefix
	// bind: the address goes on the VIP device (not a node address).
	bind bool
	// inside, when valid, is the ClusterIP:port that pods and the node
	// itself reach through this eTP=Local entry point: traffic from inside
	// the cluster needs no client address kept and goes to any endpoint,
	// so a node without local endpoints does not refuse it
	// (kubernetes#71596), as the iptables and nftables modes do.
	inside netip.AddrPort
}

// entries computes every entry point of sp. nodeAddrs are where its
// NodePort listens; scheduler the default scheduler.
func entries(sp *proxy.ServicePort, nodeAddrs []netip.Addr, scheduler string) []entry {
	sched := scheduler
	if sp.Scheduler != "" {
		sched = sp.Scheduler
	}
	svc := func(a netip.Addr, port uint16) Service {
		s := Service{Addr: a, Port: port, Protocol: sp.Protocol, Scheduler: sched}
		if sp.AffinityTimeout > 0 {
			s.Flags |= FlagPersistent
			s.Timeout = max(sp.AffinityTimeout.Round(time.Second), time.Second)
		}
		return s
	}
	internal := destinations(sp.Selected.InternalEndpoints(sp))
	external := destinations(sp.Selected.ExternalEndpoints(sp))
	masq := !sp.ExternalPolicyLocal
	// The ClusterIP's virtual server has the cluster-wide endpoints when
	// the Service uses them (iTP=Cluster): under eTP=Local, inside traffic
	// to the external entry points is sent there.
	var inside netip.AddrPort
	if sp.ExternalPolicyLocal && sp.Selected.UsesCluster && len(sp.Selected.Cluster) > 0 {
		inside = netip.AddrPortFrom(sp.ClusterIP, sp.Port)
	}
	out := []entry{{svc: svc(sp.ClusterIP, sp.Port), dests: internal, bind: true}}
	for _, a := range sp.ExternalIPs {
		out = append(out, entry{svc: svc(a, sp.Port), dests: external, external: true, masq: masq, bind: true, inside: inside})
	}
	for _, a := range sp.LoadBalancerIPs {
		out = append(out, entry{svc: svc(a, sp.Port), dests: external, external: true, masq: masq, bind: true, sourceRanges: sp.LoadBalancerSourceRanges, inside: inside})
	}
	if sp.NodePort != 0 {
		for _, a := range nodeAddrs {
			out = append(out, entry{svc: svc(a, sp.NodePort), dests: external, external: true, masq: masq, inside: inside})
		}
	}
	return out
}

func destinations(eps []proxy.Endpoint) []Destination {
	out := make([]Destination, 0, len(eps))
	for _, e := range eps {
		out = append(out, Destination{Addr: e.IP, Port: e.Port, Weight: 1})
	}
	SortDestinations(out)
	return slices.CompactFunc(out, func(a, b Destination) bool { return a.Key() == b.Key() })
}
