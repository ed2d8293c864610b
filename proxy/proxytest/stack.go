package proxytest

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/proxy"
)

// IPv6 addresses of the topology, mirroring the IPv4 ones (ULA, so nothing
// here can collide with a routable address).
const (
	NodeIP6        = "fd00:50::1"
	ClientIP6      = "fd00:50::2"
	Pod1IP6        = "fd00:10:244:1::2" // on this node
	Pod2IP6        = "fd00:10:244:2::2" // reported as on another node
	Pod1GatewayIP6 = "fd00:10:244:1::1"
	Pod2GatewayIP6 = "fd00:10:244:2::1"
	ClusterCID6    = "fd00:10:244::/48"
	LBIP6          = "fd00:60::10"
)

// Service ClusterIP ranges the API server allocates from. IPv4 is listed
// first so it stays the primary family: a Service that names no family is
// IPv4, as before the topology became dual-stack.
var serviceCIDRs = cidrlist.MustParse("10.96.0.0/12", "fd00:10:96::/112")

// Pod1v6 and Pod2v6 are the IPv6 addresses of the same two pods.
var (
	Pod1v6 = Backend{IP: Pod1IP6, Node: NodeName, Ready: true}
	Pod2v6 = Backend{IP: Pod2IP6, Node: "node-b", Ready: true}
)

// stack is one IP family's half of the dual-stack topology. The traffic
// cases take one, so IPv4 and IPv6 go through the very same checks.
type stack struct {
	family   proxy.Family
	nodeIP   string
	clientIP string
	lbIP     string
	pod1     Backend
	pod2     Backend
	// dead is an endpoint nobody answers for: an address on pod2's link
	// that no namespace holds, as a pod that died before it left its
	// Service.
	dead Backend
	// suffix keeps the two families' Services apart: both run in one API
	// server's "default" namespace, where a name is taken only once.
	suffix string
}

var (
	ipv4Stack = stack{family: proxy.IPv4, nodeIP: NodeIP, clientIP: ClientIP, lbIP: LBIP, pod1: Pod1, pod2: Pod2,
		dead: Backend{IP: "10.244.2.99", Node: "node-b", Ready: true}}
	ipv6Stack = stack{family: proxy.IPv6, nodeIP: NodeIP6, clientIP: ClientIP6, lbIP: LBIP6, pod1: Pod1v6, pod2: Pod2v6,
		dead: Backend{IP: "fd00:10:244:2::99", Node: "node-b", Ready: true}, suffix: "-v6"}
)

// service is Service pinned to this stack's family (single-stack), so the
// API server allocates the ClusterIP from the right range.
func (s stack) service(name string, proto v1.Protocol, port int32) *v1.Service {
	svc := Service(name+s.suffix, proto, port)
	policy := v1.IPFamilyPolicySingleStack
	svc.Spec.IPFamilyPolicy = &policy
	svc.Spec.IPFamilies = []v1.IPFamily{ipFamily(s.family)}
	return svc
}

// create creates svc and checks that its ClusterIP is of this stack's
// family, so an IPv6 case cannot quietly pass over IPv4.
func (s stack) create(t testing.TB, e *Env, svc *v1.Service) *v1.Service {
	t.Helper()
	out := e.CreateService(t, svc)
	if ip, err := netip.ParseAddr(out.Spec.ClusterIP); err != nil || !s.family.Contains(ip) {
		t.Fatalf("service %s got ClusterIP %q, want %s", out.Name, out.Spec.ClusterIP, s.family)
	}
	return out
}

func ipFamily(f proxy.Family) v1.IPFamily {
	if f == proxy.IPv6 {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

// sliceAddressType is the EndpointSlice address type for backends of svc:
// the backends' family, or the Service's primary family when there are
// none, since a slice holds one family only.
func sliceAddressType(svc *v1.Service, backends []Backend) discovery.AddressType {
	is6 := len(svc.Spec.IPFamilies) > 0 && svc.Spec.IPFamilies[0] == v1.IPv6Protocol
	if len(backends) > 0 {
		a, err := netip.ParseAddr(backends[0].IP)
		is6 = err == nil && a.Is6()
	}
	if is6 {
		return discovery.AddressTypeIPv6
	}
	return discovery.AddressTypeIPv4
}
