package proxytest

import (
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodenet/nodenet/proxy"
)

// PortOpt tweaks a test service port. These builders are shared by every
// data plane's unit tests (golden rules, tracers, fakes).
type PortOpt func(*proxy.ServicePort)

// PortName names port "port" of a service.
func PortName(ns, name, port string, proto proxy.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

// Port builds a ServicePort; opts add endpoints and features.
func Port(ns, name string, cip string, port uint16, proto proxy.Protocol, opts ...PortOpt) *proxy.ServicePort {
	sp := &proxy.ServicePort{
		Name:      PortName(ns, name, "p", proto),
		ClusterIP: netip.MustParseAddr(cip),
		Port:      port,
		Protocol:  proto,
	}
	for _, o := range opts {
		o(sp)
	}
	return sp
}

// WithEndpoints adds ready endpoints on another node.
func WithEndpoints(port uint16, addrs ...string) PortOpt {
	return func(sp *proxy.ServicePort) {
		for _, a := range addrs {
			sp.Endpoints = append(sp.Endpoints, proxy.Endpoint{IP: netip.MustParseAddr(a), Port: port, Ready: true, Serving: true, NodeName: "remote"})
		}
	}
}

// WithLocalEndpoints adds ready endpoints on this node.
func WithLocalEndpoints(port uint16, addrs ...string) PortOpt {
	return func(sp *proxy.ServicePort) {
		for _, a := range addrs {
			sp.Endpoints = append(sp.Endpoints, proxy.Endpoint{IP: netip.MustParseAddr(a), Port: port, Ready: true, Serving: true, NodeName: "node", IsLocal: true})
		}
	}
}

// WithNodePort sets the NodePort.
func WithNodePort(np uint16) PortOpt { return func(sp *proxy.ServicePort) { sp.NodePort = np } }

// WithExternalIPs adds external IPs.
func WithExternalIPs(a ...string) PortOpt {
	return func(sp *proxy.ServicePort) {
		for _, s := range a {
			sp.ExternalIPs = append(sp.ExternalIPs, netip.MustParseAddr(s))
		}
	}
}

// WithLB adds a load-balancer IP and its source ranges.
func WithLB(ip string, ranges ...string) PortOpt {
	return func(sp *proxy.ServicePort) {
		sp.LoadBalancerIPs = append(sp.LoadBalancerIPs, netip.MustParseAddr(ip))
		for _, r := range ranges {
			sp.LoadBalancerSourceRanges = append(sp.LoadBalancerSourceRanges, netip.MustParsePrefix(r))
		}
	}
}

// WithETPLocal sets externalTrafficPolicy Local.
func WithETPLocal(sp *proxy.ServicePort) { sp.ExternalPolicyLocal = true }

// WithITPLocal sets internalTrafficPolicy Local.
func WithITPLocal(sp *proxy.ServicePort) { sp.InternalPolicyLocal = true }

// WithAffinity sets ClientIP affinity with timeout d.
func WithAffinity(d time.Duration) PortOpt {
	return func(sp *proxy.ServicePort) { sp.AffinityTimeout = d }
}

// Snapshot builds a snapshot with endpoint selection done, like the core does.
func Snapshot(fam proxy.Family, ports ...*proxy.ServicePort) *proxy.Snapshot {
	s := &proxy.Snapshot{
		Family:       fam,
		Node:         proxy.NodeInfo{Name: "node"},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		NodePorts:    proxy.NodePorts{All: true},
		Services:     map[proxy.ServicePortName]*proxy.ServicePort{},
	}
	if fam == proxy.IPv6 {
		s.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("fd10::/64")}
	}
	for _, sp := range ports {
		sp.Selected = proxy.SelectEndpoints(sp, s.Node)
		s.Services[sp.Name] = sp
	}
	return s
}

// Changed names services for a partial ChangeSet.
func Changed(names ...proxy.ServicePortName) proxy.ChangeSet {
	cs := proxy.ChangeSet{Services: map[types.NamespacedName]struct{}{}}
	for _, n := range names {
		cs.Services[n.NamespacedName] = struct{}{}
	}
	return cs
}

// Full is the ChangeSet of a complete resync.
var Full = proxy.ChangeSet{Full: true}
