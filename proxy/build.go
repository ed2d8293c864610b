package proxy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ErrInvalid marks input the proxy cannot program (bad IP, port 0, unknown
// protocol); such a service port or endpoint is skipped, logged and counted,
// never blocking the rest.
var ErrInvalid = errors.New("invalid input")

// IsInvalid reports whether err is (or wraps) ErrInvalid.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// InvalidError is one skipped piece of input; it is ErrInvalid (errors.Is)
// and says which kind of object it came from, the label of the
// invalid-input metric.
type InvalidError struct {
	Kind InputKind
	Msg  string
}

// InputKind is the object an InvalidError came from.
type InputKind string

// Kinds of invalid input.
const (
	InvalidService       InputKind = "service"
	InvalidEndpointSlice InputKind = "endpointslice"
)

func (e *InvalidError) Error() string { return ErrInvalid.Error() + ": " + e.Msg }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(kind InputKind, format string, a ...any) error {
	return &InvalidError{Kind: kind, Msg: fmt.Sprintf(format, a...)}
}

// ServiceFamilies returns the families a Service has a ClusterIP in. Headless
// and ExternalName services have none.
func serviceClusterIP(svc *v1.Service, f Family) (netip.Addr, bool, error) {
	if svc.Spec.Type == v1.ServiceTypeExternalName {
		return netip.Addr{}, false, nil
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if s == "" || s == v1.ClusterIPNone {
			return netip.Addr{}, false, nil
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, false, invalid(InvalidService, "service %s/%s: clusterIP %q", svc.Namespace, svc.Name, s)
		}
		if f.Contains(a) {
			return a.Unmap(), true, nil
		}
	}
	return netip.Addr{}, false, nil
}

// ServicePortsFor converts one Service into its service ports of family f
// (without endpoints). Invalid ports are returned as errors wrapping
// ErrInvalid; valid ports are still returned.
func ServicePortsFor(svc *v1.Service, f Family) ([]*ServicePort, []error) {
	var errs []error
	cip, ok, err := serviceClusterIP(svc, f)
	if err != nil {
		return nil, []error{err}
	}
	if !ok {
		return nil, nil
	}
	nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}

	externalIPs, e := parseAddrs(svc.Spec.ExternalIPs, f, "externalIP", nn)
	errs = append(errs, e...)
	var ingress []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" && (in.IPMode == nil || *in.IPMode == v1.LoadBalancerIPModeVIP) {
			ingress = append(ingress, in.IP)
		}
	}
	lbIPs, e := parseAddrs(ingress, f, "loadBalancer ingress IP", nn)
	errs = append(errs, e...)
	var ranges []netip.Prefix
	for _, s := range svc.Spec.LoadBalancerSourceRanges {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, invalid(InvalidService, "service %s: loadBalancerSourceRange %q", nn, s))
			continue
		}
		if f.Contains(p.Addr()) {
			ranges = append(ranges, p.Masked())
		}
	}
	slices.SortFunc(ranges, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	ranges = slices.Compact(ranges)

	var affinity time.Duration
	if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
		affinity = time.Duration(v1.DefaultClientIPServiceAffinitySeconds) * time.Second
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			affinity = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	hasExternal := svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer || len(externalIPs) > 0
	eLocal := hasExternal && svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	iLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal
	var dist string
	if svc.Spec.TrafficDistribution != nil {
		dist = *svc.Spec.TrafficDistribution
	}

	var out []*ServicePort
	for _, p := range svc.Spec.Ports {
		proto, err := parseProtocol(p.Protocol)
		if err != nil {
			errs = append(errs, invalid(InvalidService, "service %s port %q: %v", nn, p.Name, err))
			continue
		}
		if p.Port <= 0 || p.Port > 65535 {
			errs = append(errs, invalid(InvalidService, "service %s port %q: port %d", nn, p.Name, p.Port))
			continue
		}
		if p.NodePort < 0 || p.NodePort > 65535 {
			errs = append(errs, invalid(InvalidService, "service %s port %q: nodePort %d", nn, p.Name, p.NodePort))
			continue
		}
		sp := &ServicePort{
			Name:                     ServicePortName{NamespacedName: nn, Port: p.Name, Protocol: proto},
			ClusterIP:                cip,
			Port:                     uint16(p.Port),
			Protocol:                 proto,
			ExternalIPs:              externalIPs,
			LoadBalancerIPs:          lbIPs,
			LoadBalancerSourceRanges: ranges,
			ExternalPolicyLocal:      eLocal,
			InternalPolicyLocal:      iLocal,
			AffinityTimeout:          affinity,
			TrafficDistribution:      dist,
			Scheduler:                svc.Annotations[SchedulerAnnotation],
		}
		if svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer {
			sp.NodePort = uint16(p.NodePort)
		}
		if eLocal && svc.Spec.Type == v1.ServiceTypeLoadBalancer && svc.Spec.HealthCheckNodePort > 0 && svc.Spec.HealthCheckNodePort <= 65535 {
			sp.HealthCheckNodePort = uint16(svc.Spec.HealthCheckNodePort)
		}
		out = append(out, sp)
	}
	return out, errs
}

func parseProtocol(p v1.Protocol) (Protocol, error) {
	switch p {
	case "", v1.ProtocolTCP:
		return TCP, nil
	case v1.ProtocolUDP:
		return UDP, nil
	case v1.ProtocolSCTP:
		return SCTP, nil
	}
	return "", fmt.Errorf("unknown protocol %q", p)
}

func parseAddrs(in []string, f Family, what string, nn types.NamespacedName) ([]netip.Addr, []error) {
	var out []netip.Addr
	var errs []error
	for _, s := range in {
		a, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, invalid(InvalidService, "service %s: %s %q", nn, what, s))
			continue
		}
		if f.Contains(a) {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), errs
}

// SliceFamily maps an EndpointSlice address type to a family (false for FQDN).
func SliceFamily(t discovery.AddressType) (Family, bool) {
	switch t {
	case discovery.AddressTypeIPv4:
		return IPv4, true
	case discovery.AddressTypeIPv6:
		return IPv6, true
	}
	return 0, false
}

// EndpointsFor collects, for the service ports sps (all of one service and
// family f), their endpoints from the service's EndpointSlices, deduplicated
// by address:port across slices (the first ready copy wins, else the first
// copy). node is this node's name. Invalid endpoints are skipped and
// reported.
//
// It runs for every service of a full sync, so it allocates only the lists
// it returns, each sized up front (they live as long as their service
// port): a service has a port or two, found by a linear scan, and
// duplicates are found by sorting rather than in per-port maps, which were
// most of a cold sync's endpoint work at 10,000 services.
func EndpointsFor(sps []*ServicePort, slices_ []*discovery.EndpointSlice, f Family, node string) []error {
	find := func(p discovery.EndpointPort) (int, *ServicePort, error) {
		proto, err := parseProtocol(ptrOr(p.Protocol, v1.ProtocolTCP))
		if err != nil {
			return 0, nil, err
		}
		name := ptrOr(p.Name, "")
		for i, sp := range sps {
			if sp.Name.Port == name && sp.Protocol == proto {
				return i, sp, nil
			}
		}
		return 0, nil, nil
	}
	sizes := make([]int, len(sps))
	for _, sl := range slices_ {
		if fam, ok := SliceFamily(sl.AddressType); !ok || fam != f {
			continue
		}
		for _, p := range sl.Ports {
			if i, sp, _ := find(p); sp != nil {
				sizes[i] += len(sl.Endpoints)
			}
		}
	}
	for i, sp := range sps {
		sp.Endpoints = nil
		if sizes[i] > 0 {
			sp.Endpoints = make([]Endpoint, 0, sizes[i])
		}
	}
	var errs []error
	for _, sl := range slices_ {
		if fam, ok := SliceFamily(sl.AddressType); !ok || fam != f {
			continue
		}
		for _, p := range sl.Ports {
			_, sp, err := find(p)
			if err != nil {
				errs = append(errs, invalid(InvalidEndpointSlice, "endpointslice %s/%s: %v", sl.Namespace, sl.Name, err))
				continue
			}
			if sp == nil {
				continue
			}
			port := ptrOr(p.Port, 0)
			if port <= 0 || port > 65535 {
				errs = append(errs, invalid(InvalidEndpointSlice, "endpointslice %s/%s port %q: port %d", sl.Namespace, sl.Name, ptrOr(p.Name, ""), port))
				continue
			}
			for _, ep := range sl.Endpoints {
				if len(ep.Addresses) == 0 {
					continue
				}
				a, err := netip.ParseAddr(ep.Addresses[0])
				if err != nil || !f.Contains(a) {
					errs = append(errs, invalid(InvalidEndpointSlice, "endpointslice %s/%s: address %q", sl.Namespace, sl.Name, ep.Addresses[0]))
					continue
				}
				sp.Endpoints = append(sp.Endpoints, toEndpoint(ep, a.Unmap(), uint16(port), node))
			}
		}
	}
	for _, sp := range sps {
		sp.Endpoints = sortDedup(sp.Endpoints)
	}
	return errs
}

// sortDedup sorts eps by address:port and keeps one endpoint per
// address:port: the first ready one in eps' order, else the first.
func sortDedup(eps []Endpoint) []Endpoint {
	slices.SortStableFunc(eps, compareEndpoints)
	out := eps[:0]
	for i := 0; i < len(eps); {
		j, keep := i+1, i
		for ; j < len(eps) && eps[j].AddrPort() == eps[i].AddrPort(); j++ {
			if eps[j].Ready && !eps[keep].Ready {
				keep = j
			}
		}
		out = append(out, eps[keep])
		i = j
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func toEndpoint(ep discovery.Endpoint, a netip.Addr, port uint16, node string) Endpoint {
	ready := ptrOr(ep.Conditions.Ready, true)
	e := Endpoint{
		IP:          a,
		Port:        port,
		Ready:       ready,
		Serving:     ptrOr(ep.Conditions.Serving, ready),
		Terminating: ptrOr(ep.Conditions.Terminating, false),
		NodeName:    ptrOr(ep.NodeName, ""),
		Zone:        ptrOr(ep.Zone, ""),
	}
	e.IsLocal = node != "" && e.NodeName == node
	if ep.Hints != nil {
		for _, z := range ep.Hints.ForZones {
			e.ZoneHints = append(e.ZoneHints, z.Name)
		}
		for _, n := range ep.Hints.ForNodes {
			e.NodeHints = append(e.NodeHints, n.Name)
		}
	}
	return e
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
