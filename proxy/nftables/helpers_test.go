package nftables

import (
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodenet/nodenet/proxy"
)

// svcOpt tweaks a test service port.
type svcOpt func(*proxy.ServicePort)

func spName(ns, name, port string, proto proxy.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

func mkPort(ns, name string, cip string, port uint16, proto proxy.Protocol, opts ...svcOpt) *proxy.ServicePort {
	sp := &proxy.ServicePort{
		Name:      spName(ns, name, "p", proto),
		ClusterIP: netip.MustParseAddr(cip),
		Port:      port,
		Protocol:  proto,
	}
	for _, o := range opts {
		o(sp)
	}
	return sp
}

func withEndpoints(port uint16, addrs ...string) svcOpt {
	return func(sp *proxy.ServicePort) {
		for _, a := range addrs {
			sp.Endpoints = append(sp.Endpoints, proxy.Endpoint{IP: netip.MustParseAddr(a), Port: port, Ready: true, Serving: true, NodeName: "remote"})
		}
	}
}

func withLocalEndpoints(port uint16, addrs ...string) svcOpt {
	return func(sp *proxy.ServicePort) {
		for _, a := range addrs {
			sp.Endpoints = append(sp.Endpoints, proxy.Endpoint{IP: netip.MustParseAddr(a), Port: port, Ready: true, Serving: true, NodeName: "node", IsLocal: true})
		}
	}
}

func withNodePort(np uint16) svcOpt { return func(sp *proxy.ServicePort) { sp.NodePort = np } }
func withExternalIPs(a ...string) svcOpt {
	return func(sp *proxy.ServicePort) {
		for _, s := range a {
			sp.ExternalIPs = append(sp.ExternalIPs, netip.MustParseAddr(s))
		}
	}
}
func withLB(ip string, ranges ...string) svcOpt {
	return func(sp *proxy.ServicePort) {
		sp.LoadBalancerIPs = append(sp.LoadBalancerIPs, netip.MustParseAddr(ip))
		for _, r := range ranges {
			sp.LoadBalancerSourceRanges = append(sp.LoadBalancerSourceRanges, netip.MustParsePrefix(r))
		}
	}
}
func withETPLocal(sp *proxy.ServicePort) { sp.ExternalPolicyLocal = true }
func withITPLocal(sp *proxy.ServicePort) { sp.InternalPolicyLocal = true }
func withAffinity(d time.Duration) svcOpt {
	return func(sp *proxy.ServicePort) { sp.AffinityTimeout = d }
}

// mkSnap builds a snapshot with endpoint selection done, like the core does.
func mkSnap(fam proxy.Family, ports ...*proxy.ServicePort) *proxy.Snapshot {
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

// changed names services for a partial ChangeSet.
func changed(names ...proxy.ServicePortName) proxy.ChangeSet {
	cs := proxy.ChangeSet{Services: map[types.NamespacedName]struct{}{}}
	for _, n := range names {
		cs.Services[n.NamespacedName] = struct{}{}
	}
	return cs
}

var full = proxy.ChangeSet{Full: true}

func withMasqueradeAll(s *proxy.Snapshot) *proxy.Snapshot { s.MasqueradeAll = true; return s }

func v4(s string) netip.Addr { return netip.MustParseAddr(s) }
