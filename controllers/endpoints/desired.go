package endpoints

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxAddresses is upstream's cap on the addresses of one Endpoints object:
// beyond it, consumers are expected to read EndpointSlices.
const maxAddresses = 1000

// desired computes the Endpoints svc should have from its slices.
func desired(svc *corev1.Service, sliceList []*discoveryv1.EndpointSlice) *corev1.Endpoints {
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: map[string]string{}, Annotations: map[string]string{}},
	}
	for k, v := range svc.Labels {
		ep.Labels[k] = v
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		ep.Labels[corev1.IsHeadlessService] = ""
	} else {
		delete(ep.Labels, corev1.IsHeadlessService)
	}
	ep.Labels[LabelManagedBy] = ControllerName

	family := discoveryv1.AddressTypeIPv4
	if len(svc.Spec.IPFamilies) > 0 && svc.Spec.IPFamilies[0] == corev1.IPv6Protocol {
		family = discoveryv1.AddressTypeIPv6
	}
	type group struct {
		ports []corev1.EndpointPort
		ready map[string]bool // by IP
		addrs map[string]corev1.EndpointAddress
	}
	var latest time.Time
	groups := map[string]*group{} // by port-set key
	for _, s := range sliceList {
		if s.AddressType != family {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, s.Annotations[corev1.EndpointsLastChangeTriggerTime]); err == nil && t.After(latest) {
			latest = t
		}
		ports := endpointPorts(s.Ports)
		pk := portsKey(ports)
		g := groups[pk]
		if g == nil {
			g = &group{ports: ports, ready: map[string]bool{}, addrs: map[string]corev1.EndpointAddress{}}
			groups[pk] = g
		}
		for _, e := range s.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready
			terminating := e.Conditions.Terminating != nil && *e.Conditions.Terminating
			if len(e.Addresses) == 0 || (terminating && !ready) {
				continue
			}
			// An address in two slices (while one replaces the other) is
			// listed once; ready wins.
			ip := e.Addresses[0]
			if _, dup := g.addrs[ip]; dup && g.ready[ip] {
				continue
			}
			g.addrs[ip], g.ready[ip] = endpointAddress(e), ready
		}
	}
	keys := make([]string, 0, len(groups))
	for k, g := range groups {
		if len(g.addrs) > 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		g := groups[k]
		ss := corev1.EndpointSubset{Ports: g.ports}
		for ip, a := range g.addrs {
			if g.ready[ip] {
				ss.Addresses = append(ss.Addresses, a)
			} else {
				ss.NotReadyAddresses = append(ss.NotReadyAddresses, a)
			}
		}
		sortAddresses(ss.Addresses)
		sortAddresses(ss.NotReadyAddresses)
		ep.Subsets = append(ep.Subsets, ss)
	}
	if !latest.IsZero() {
		ep.Annotations[corev1.EndpointsLastChangeTriggerTime] = latest.UTC().Format(time.RFC3339Nano)
	}
	if truncate(ep.Subsets, maxAddresses) {
		ep.Annotations[corev1.EndpointsOverCapacity] = "truncated"
	}
	return ep
}

func endpointAddress(e discoveryv1.Endpoint) corev1.EndpointAddress {
	a := corev1.EndpointAddress{IP: e.Addresses[0], NodeName: e.NodeName}
	if e.Hostname != nil {
		a.Hostname = *e.Hostname
	}
	if e.TargetRef != nil {
		ref := *e.TargetRef
		a.TargetRef = &ref
	}
	return a
}

// endpointPorts converts slice ports, sorted by name so that the same set
// always gives the same subset. A port without a number (a slice's "all
// ports") has no Endpoints form and is left out.
func endpointPorts(in []discoveryv1.EndpointPort) []corev1.EndpointPort {
	var out []corev1.EndpointPort
	for _, p := range in {
		if p.Port == nil {
			continue
		}
		ep := corev1.EndpointPort{Port: *p.Port, Protocol: corev1.ProtocolTCP, AppProtocol: p.AppProtocol}
		if p.Name != nil {
			ep.Name = *p.Name
		}
		if p.Protocol != nil {
			ep.Protocol = *p.Protocol
		}
		out = append(out, ep)
	}
	slices.SortFunc(out, func(a, b corev1.EndpointPort) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Port, b.Port), strings.Compare(string(a.Protocol), string(b.Protocol)))
	})
	return out
}

func portsKey(ports []corev1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ports {
		b.WriteString(p.Name + "/" + strconv.Itoa(int(p.Port)) + "/" + string(p.Protocol) + ",")
	}
	return b.String()
}

func sortAddresses(a []corev1.EndpointAddress) {
	slices.SortFunc(a, func(x, y corev1.EndpointAddress) int {
		c := strings.Compare(x.IP, y.IP)
		if c == 0 && x.TargetRef != nil && y.TargetRef != nil {
			c = strings.Compare(string(x.TargetRef.UID), string(y.TargetRef.UID))
		}
		return c
	})
}

// truncate cuts subsets down to limit addresses and reports whether it did.
// Ready addresses are kept before not-ready ones; the kind that has to be
// cut is cut in each subset in proportion to its share (rounded up, so the
// last subsets may get fewer), which keeps every port set represented.
func truncate(subsets []corev1.EndpointSubset, limit int) bool {
	ready, notReady := 0, 0
	for _, ss := range subsets {
		ready += len(ss.Addresses)
		notReady += len(ss.NotReadyAddresses)
	}
	if ready+notReady <= limit {
		return false
	}
	cutReady := ready > limit
	budget, total := limit-ready, notReady
	if cutReady {
		budget, total = limit, ready
	}
	left := budget
	for i := range subsets {
		ss := &subsets[i]
		list := &ss.NotReadyAddresses
		if cutReady {
			list = &ss.Addresses
			ss.NotReadyAddresses = nil
		}
		keep := min(int(math.Ceil(float64(len(*list))*float64(budget)/float64(total))), left, len(*list))
		*list = (*list)[:keep]
		left -= keep
	}
	return true
}
