package proxy

import (
	"slices"
	"sync"
	"sync/atomic"
	"unique"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// The informers' caches hold every Service and EndpointSlice for the life
// of the proxy, as the JSON decoder left them: each list grown to a
// capacity of four or more (a Service's one port, an endpoint's one
// address), each optional field a separate small allocation (three
// condition pointers per endpoint, a port's name, protocol and number),
// each namespace and node name a copy of its own. compactService and
// compactSlice (run by StripUnused, before an object is cached) rebuild
// those parts: lists exactly sized, pointers to one shared copy of each
// distinct value, strings interned. At 10,000 Services that is a sixth of
// the proxy's live heap (bench/README.md, BenchmarkProxyProcess).
//
// Sharing is safe because cached objects are read-only: neither the
// informers nor the proxy write into them (client-go's rule for its
// caches).

func compactService(svc *v1.Service) {
	svc.Namespace = intern(svc.Namespace)
	svc.Spec.Ports = exact(svc.Spec.Ports)
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		p.Name = intern(p.Name)
		p.Protocol = v1.Protocol(intern(string(p.Protocol)))
		p.AppProtocol = sharedStrings.ptr(p.AppProtocol)
	}
	svc.Spec.ClusterIPs = exact(svc.Spec.ClusterIPs)
	if len(svc.Spec.ClusterIPs) > 0 && svc.Spec.ClusterIP == svc.Spec.ClusterIPs[0] {
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0] // one copy of the address
	}
	svc.Spec.IPFamilies = exact(svc.Spec.IPFamilies)
	for i, f := range svc.Spec.IPFamilies {
		svc.Spec.IPFamilies[i] = v1.IPFamily(intern(string(f)))
	}
	svc.Spec.ExternalIPs = exact(svc.Spec.ExternalIPs)
	svc.Spec.LoadBalancerSourceRanges = exact(svc.Spec.LoadBalancerSourceRanges)
	svc.Spec.Type = v1.ServiceType(intern(string(svc.Spec.Type)))
	svc.Spec.SessionAffinity = v1.ServiceAffinity(intern(string(svc.Spec.SessionAffinity)))
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicy(intern(string(svc.Spec.ExternalTrafficPolicy)))
	svc.Spec.IPFamilyPolicy = (*v1.IPFamilyPolicy)(sharedStrings.ptr((*string)(svc.Spec.IPFamilyPolicy)))
	svc.Spec.InternalTrafficPolicy = (*v1.ServiceInternalTrafficPolicy)(sharedStrings.ptr((*string)(svc.Spec.InternalTrafficPolicy)))
	svc.Spec.AllocateLoadBalancerNodePorts = sharedBools.ptr(svc.Spec.AllocateLoadBalancerNodePorts)
	svc.Spec.TrafficDistribution = sharedStrings.ptr(svc.Spec.TrafficDistribution)
	svc.Status.LoadBalancer.Ingress = exact(svc.Status.LoadBalancer.Ingress)
}

func compactSlice(sl *discovery.EndpointSlice) {
	sl.Namespace = intern(sl.Namespace)
	sl.AddressType = discovery.AddressType(intern(string(sl.AddressType)))
	sl.Endpoints = exact(sl.Endpoints)
	for i := range sl.Endpoints {
		ep := &sl.Endpoints[i]
		ep.Addresses = exact(ep.Addresses)
		ep.Conditions.Ready = sharedBools.ptr(ep.Conditions.Ready)
		ep.Conditions.Serving = sharedBools.ptr(ep.Conditions.Serving)
		ep.Conditions.Terminating = sharedBools.ptr(ep.Conditions.Terminating)
		ep.NodeName = sharedStrings.ptr(ep.NodeName)
		ep.Zone = sharedStrings.ptr(ep.Zone)
	}
	sl.Ports = exact(sl.Ports)
	for i := range sl.Ports {
		p := &sl.Ports[i]
		p.Name = sharedStrings.ptr(p.Name)
		p.Protocol = (*v1.Protocol)(sharedStrings.ptr((*string)(p.Protocol)))
		p.Port = sharedPorts.ptr(p.Port)
		p.AppProtocol = sharedStrings.ptr(p.AppProtocol)
	}
}

// exact is s in a backing array of its own length (nil stays nil, empty
// becomes nil).
func exact[S ~[]E, E any](s S) S {
	if len(s) == 0 {
		return nil
	}
	if cap(s) == len(s) {
		return s
	}
	return slices.Clone(s)
}

// intern returns the one shared copy of s.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// maxShared bounds each table of shared values: values come from the API,
// so a cluster with unbounded variety (a name per endpoint) stops sharing
// new ones rather than growing the table without end.
const maxShared = 1 << 16

// shared keeps one pointer per distinct value of T.
type shared[T comparable] struct {
	m sync.Map // T → *T
	n atomic.Int64
}

var (
	sharedBools   shared[bool]
	sharedPorts   shared[int32]
	sharedStrings shared[string]
)

// ptr returns the shared pointer to *p's value (p itself the first time,
// or when the table is full); nil stays nil.
func (s *shared[T]) ptr(p *T) *T {
	if p == nil {
		return nil
	}
	if q, ok := s.m.Load(*p); ok {
		return q.(*T)
	}
	if s.n.Load() >= maxShared {
		return p
	}
	q, loaded := s.m.LoadOrStore(*p, p)
	if !loaded {
		s.n.Add(1)
	}
	return q.(*T)
}
