package endpointslice

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// groupKey identifies one slice set of a Service: slices hold one address
// family, and every endpoint of a slice shares the slice's ports, so pods on
// which a named targetPort resolves differently land in different slices.
type groupKey struct {
	addressType discoveryv1.AddressType
	ports       string // portsKey of the group's ports
}

// group is the desired content of one slice set.
type group struct {
	key       groupKey
	ports     []discoveryv1.EndpointPort // sorted by name
	endpoints map[string]discoveryv1.Endpoint
}

// endpointKey identifies an endpoint within a group: pods are unique by name
// in the Service's namespace. Endpoints without a pod reference (written by
// someone else) get "", which no desired endpoint has.
func endpointKey(ep *discoveryv1.Endpoint) string {
	if ep.TargetRef == nil {
		return ""
	}
	return ep.TargetRef.Name
}

// desiredGroups computes the endpoints svc should have, from the caches.
func (c *Controller) desiredGroups(svc *corev1.Service) map[groupKey]*group {
	types := serviceAddressTypes(svc)
	groups := map[groupKey]*group{}
	zones := map[string]*string{}
	for _, pod := range c.podsForService(svc) {
		if !podEligible(pod) {
			continue
		}
		ports := resolvePorts(svc, pod)
		pk := portsKey(ports)
		for _, at := range types {
			addr := podIPOf(pod, at)
			if addr == "" {
				continue
			}
			key := groupKey{addressType: at, ports: pk}
			g := groups[key]
			if g == nil {
				g = &group{key: key, ports: ports, endpoints: map[string]discoveryv1.Endpoint{}}
				groups[key] = g
			}
			g.endpoints[pod.Name] = c.endpointFor(svc, pod, addr, zones)
		}
	}
	return groups
}

// podEligible: a pod is listed once it has an IP and until it has finished.
// Terminating pods stay (with ready=false) so proxies can drain them.
func podEligible(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	return pod.Status.PodIP != "" || len(pod.Status.PodIPs) > 0
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (c *Controller) endpointFor(svc *corev1.Service, pod *corev1.Pod, addr string, zones map[string]*string) discoveryv1.Endpoint {
	terminating := pod.DeletionTimestamp != nil
	serving := podReady(pod)
	ready := serving && !terminating
	if svc.Spec.PublishNotReadyAddresses {
		ready, serving = true, true
	}
	ep := discoveryv1.Endpoint{
		Addresses: []string{addr},
		Conditions: discoveryv1.EndpointConditions{
			Ready: &ready, Serving: &serving, Terminating: &terminating,
		},
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
	}
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name {
		h := pod.Spec.Hostname
		ep.Hostname = &h
	}
	if n := pod.Spec.NodeName; n != "" {
		ep.NodeName = &n
		ep.Zone = c.nodeZone(n, zones)
	}
	return ep
}

// nodeZone returns the zone label of a node, memoised for one sync.
func (c *Controller) nodeZone(name string, memo map[string]*string) *string {
	if z, ok := memo[name]; ok {
		return z
	}
	var zone *string
	if node, err := c.nodes.Get(name); err == nil {
		if z, ok := node.Labels[corev1.LabelTopologyZone]; ok && z != "" {
			zone = &z
		}
	}
	memo[name] = zone
	return zone
}

// serviceAddressTypes: the Service's ipFamilies, else the family of its
// clusterIP, else (a headless Service from before dual-stack) both.
func serviceAddressTypes(svc *corev1.Service) []discoveryv1.AddressType {
	if len(svc.Spec.IPFamilies) > 0 {
		out := make([]discoveryv1.AddressType, 0, len(svc.Spec.IPFamilies))
		for _, f := range svc.Spec.IPFamilies {
			switch f {
			case corev1.IPv4Protocol:
				out = append(out, discoveryv1.AddressTypeIPv4)
			case corev1.IPv6Protocol:
				out = append(out, discoveryv1.AddressTypeIPv6)
			}
		}
		return out
	}
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
		if ip.Is4() {
			return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4}
		}
		return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv6}
	}
	return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}
}

// podIPOf returns the pod's IP of the address type, or "".
func podIPOf(pod *corev1.Pod, at discoveryv1.AddressType) string {
	match := func(s string) bool {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return false
		}
		if at == discoveryv1.AddressTypeIPv4 {
			return ip.Is4()
		}
		return ip.Is6() && !ip.Is4In6()
	}
	for _, ip := range pod.Status.PodIPs {
		if match(ip.IP) {
			return ip.IP
		}
	}
	if len(pod.Status.PodIPs) == 0 && match(pod.Status.PodIP) {
		return pod.Status.PodIP
	}
	return ""
}

// resolvePorts returns the slice ports of svc for one pod, sorted by name.
// A named targetPort the pod does not expose is left out, which puts the pod
// in a slice set of its own: proxies then send that port's traffic only to
// pods that serve it.
func resolvePorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	out := make([]discoveryv1.EndpointPort, 0, len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		num, ok := targetPort(sp.TargetPort, sp.Port, proto, pod)
		if !ok {
			continue
		}
		name := sp.Name
		p := discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &num}
		if sp.AppProtocol != nil {
			ap := *sp.AppProtocol
			p.AppProtocol = &ap
		}
		out = append(out, p)
	}
	sortPorts(out)
	return out
}

func targetPort(tp intstr.IntOrString, port int32, proto corev1.Protocol, pod *corev1.Pod) (int32, bool) {
	if tp.Type == intstr.Int {
		if tp.IntVal == 0 {
			return port, true // unset targetPort means "same as port"
		}
		return tp.IntVal, true
	}
	if tp.StrVal == "" {
		return port, true
	}
	find := func(cs []corev1.Container, sidecarsOnly bool) (int32, bool) {
		for i := range cs {
			if sidecarsOnly && (cs[i].RestartPolicy == nil || *cs[i].RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, cp := range cs[i].Ports {
				cproto := cp.Protocol
				if cproto == "" {
					cproto = corev1.ProtocolTCP
				}
				if cp.Name == tp.StrVal && cproto == proto {
					return cp.ContainerPort, true
				}
			}
		}
		return 0, false
	}
	if n, ok := find(pod.Spec.Containers, false); ok {
		return n, true
	}
	// Sidecars (restartable init containers) serve traffic like containers.
	return find(pod.Spec.InitContainers, true)
}

func sortPorts(ports []discoveryv1.EndpointPort) {
	slices.SortFunc(ports, func(a, b discoveryv1.EndpointPort) int {
		return strings.Compare(deref(a.Name), deref(b.Name))
	})
}

// portsKey is a canonical string of a port list, independent of order.
func portsKey(ports []discoveryv1.EndpointPort) string {
	if !slices.IsSortedFunc(ports, func(a, b discoveryv1.EndpointPort) int {
		return strings.Compare(deref(a.Name), deref(b.Name))
	}) {
		ports = slices.Clone(ports)
		sortPorts(ports)
	}
	var b strings.Builder
	for _, p := range ports {
		b.WriteString(deref(p.Name))
		b.WriteByte('/')
		if p.Protocol != nil {
			b.WriteString(string(*p.Protocol))
		} else {
			b.WriteString(string(corev1.ProtocolTCP))
		}
		b.WriteByte('/')
		if p.Port != nil {
			b.WriteString(strconv.Itoa(int(*p.Port)))
		}
		b.WriteByte('/')
		b.WriteString(deref(p.AppProtocol))
		b.WriteByte(',')
	}
	return b.String()
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
