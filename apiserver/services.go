package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodenet/nodenet/apiserver/allocator"
	"github.com/nodenet/nodenet/apiserver/storage"
	"github.com/nodenet/nodenet/internal/cidrlist"
)

// claimer allocates values that must be unique across objects. The values
// are claimed as etcd keys in the same transaction as the object.
type claimer interface {
	// assign fills in unallocated values of obj (old is nil on create) and
	// returns the keys to claim and release; requested marks the keys whose
	// values the user chose.
	assign(obj, old runtime.Object) (claims storage.Claims, requested map[string]bool, errs field.ErrorList)
	// keepAllocated copies allocated values the client left empty on update.
	keepAllocated(next, cur runtime.Object)
	// release returns the claims to drop when obj is deleted.
	release(obj runtime.Object) storage.Claims
	// taken notes keys found claimed by another object.
	taken(keys []string)
	// committed notes a transaction that succeeded.
	committed(c storage.Claims)
	// abandon forgets the values assign picked for a write that did not
	// happen (dry run, refused, or lost to another object), except those in
	// keep, which another object holds.
	abandon(c storage.Claims, requested map[string]bool, keep []string)
	// describeTaken explains why obj's requested key was refused.
	describeTaken(obj runtime.Object, key string) field.ErrorList
}

const (
	serviceIPKeys   = "/registry/ranges/serviceips/"
	nodePortKeys    = "/registry/ranges/servicenodeports/"
	ipv4, ipv6      = corev1.IPv4Protocol, corev1.IPv6Protocol
	requireDual     = corev1.IPFamilyPolicyRequireDualStack
	singleStack     = corev1.IPFamilyPolicySingleStack
	typeExternal    = corev1.ServiceTypeExternalName
	typeNodePort    = corev1.ServiceTypeNodePort
	typeLB          = corev1.ServiceTypeLoadBalancer
	etpLocal        = corev1.ServiceExternalTrafficPolicyLocal
	headlessService = corev1.ClusterIPNone
)

// serviceAllocator hands out ClusterIPs and NodePorts.
type serviceAllocator struct {
	// mu makes a pick and its reservation in ips/nodePorts one step, so two
	// concurrent creates never pick the same value.
	mu        sync.Mutex
	ranges    map[corev1.IPFamily]*allocator.IPRange
	primary   corev1.IPFamily
	ports     allocator.PortRange
	ips       *allocator.Set
	nodePorts *allocator.Set
	// ipObjects stores the IPAddress objects claimed beside each ClusterIP
	// (see servicecidr.go).
	ipObjects *storage.Store
}

func newServiceAllocator(cidrs []netip.Prefix, ports allocator.PortRange) (*serviceAllocator, error) {
	if len(cidrs) == 0 {
		return nil, errors.New("--service-cluster-ip-range: want one CIDR or two of different families, got none")
	}
	if err := cidrlist.Check(cidrs, cidrlist.DualStack); err != nil {
		return nil, fmt.Errorf("--service-cluster-ip-range: %w", err)
	}
	a := &serviceAllocator{ranges: map[corev1.IPFamily]*allocator.IPRange{}, ports: ports, ips: allocator.NewSet(), nodePorts: allocator.NewSet()}
	for i, c := range cidrs {
		r, err := allocator.NewIPRange(c)
		if err != nil {
			return nil, fmt.Errorf("--service-cluster-ip-range: %w", err)
		}
		fam := familyOf(r.Prefix().Addr())
		a.ranges[fam] = r
		if i == 0 {
			a.primary = fam
		}
	}
	return a, nil
}

func familyOf(ip netip.Addr) corev1.IPFamily {
	if ip.Is4() {
		return ipv4
	}
	return ipv6
}

// load reads every claimed value so random picks rarely collide.
func (a *serviceAllocator) load(ctx context.Context, client *clientv3.Client) error {
	for prefix, set := range map[string]*allocator.Set{serviceIPKeys: a.ips, nodePortKeys: a.nodePorts} {
		resp, err := client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return fmt.Errorf("load allocations under %s: %w", prefix, err)
		}
		vals := make([]string, 0, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			vals = append(vals, strings.TrimPrefix(string(kv.Key), prefix))
		}
		set.Replace(vals)
	}
	return nil
}

func (a *serviceAllocator) assign(obj, old runtime.Object) (storage.Claims, map[string]bool, field.ErrorList) {
	svc := obj.(*corev1.Service)
	var prev *corev1.Service
	if old != nil {
		prev = old.(*corev1.Service)
	}
	requested := map[string]bool{}
	var errs field.ErrorList
	var picked []string // keys reserved in the hint sets by this call
	a.mu.Lock()
	defer a.mu.Unlock()
	if svc.Spec.Type == typeExternal {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
		svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = nil, nil
	} else {
		errs = append(errs, a.assignIPs(svc, prev, requested, &picked)...)
	}
	errs = append(errs, a.assignNodePorts(svc, prev, requested, &picked)...)
	if len(errs) > 0 {
		a.forget(picked)
		return storage.Claims{}, nil, errs
	}
	want, have := serviceKeys(svc), map[string]string{}
	if prev != nil {
		have = serviceKeys(prev)
	}
	a.ipAddressClaims(want)
	a.ipAddressClaims(have)
	c := storage.Claims{Put: map[string]string{}}
	for k, v := range want {
		if _, ok := have[k]; !ok {
			c.Put[k] = v
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			c.Release = append(c.Release, k)
		}
	}
	return c, requested, nil
}

func (a *serviceAllocator) assignIPs(svc, prev *corev1.Service, requested map[string]bool, picked *[]string) field.ErrorList {
	spec := field.NewPath("spec")
	if prev != nil && prev.Spec.Type != typeExternal && len(prev.Spec.ClusterIPs) > 0 {
		return nil // allocated before; immutable (keepAllocated + validation)
	}
	headless := svc.Spec.ClusterIP == headlessService
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var fams []corev1.IPFamily
	if !headless {
		for i, s := range ips {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				return field.ErrorList{field.Invalid(spec.Child("clusterIPs").Index(i), s, "must be a valid IP address")}
			}
			fams = append(fams, familyOf(ip))
		}
	}
	for i, f := range svc.Spec.IPFamilies {
		if i < len(fams) && fams[i] != f {
			return field.ErrorList{field.Invalid(spec.Child("ipFamilies").Index(i), f, "must match the family of clusterIPs["+strconv.Itoa(i)+"]")}
		}
		if i >= len(fams) {
			fams = append(fams, f)
		}
	}
	policy := singleStack
	if svc.Spec.IPFamilyPolicy != nil {
		policy = *svc.Spec.IPFamilyPolicy
	}
	if len(fams) == 0 {
		fams = []corev1.IPFamily{a.primary}
	}
	if policy != singleStack && len(fams) == 1 && len(a.ranges) == 2 {
		other := ipv6
		if fams[0] == ipv6 {
			other = ipv4
		}
		fams = append(fams, other)
	}
	if policy == requireDual && len(fams) < 2 {
		return field.ErrorList{field.Invalid(spec.Child("ipFamilyPolicy"), policy, "this cluster is not configured for dual-stack services")}
	}
	for i, f := range fams {
		if a.ranges[f] == nil {
			return field.ErrorList{field.Invalid(spec.Child("ipFamilies").Index(i), f, fmt.Sprintf("this cluster does not have a service range for %s", f))}
		}
	}
	svc.Spec.IPFamilies = fams
	svc.Spec.IPFamilyPolicy = &policy
	if headless {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = headlessService, []string{headlessService}
		return nil
	}
	out := make([]string, len(fams))
	for i, f := range fams {
		r := a.ranges[f]
		if i < len(ips) && ips[i] != "" {
			ip := netip.MustParseAddr(ips[i])
			if !r.Contains(ip) {
				return field.ErrorList{field.Invalid(spec.Child("clusterIPs").Index(i), ips[i],
					fmt.Sprintf("failed to allocate IP %s: provided IP is not in the valid range. The range of valid IPs is %s", ips[i], r.Prefix()))}
			}
			out[i] = ip.String()
			requested[serviceIPKeys+out[i]] = true
			if a.ipObjects != nil {
				requested[a.ipObjects.Key("", out[i])] = true
			}
			continue
		}
		ip, ok := r.Pick(a.ips)
		if !ok {
			return field.ErrorList{field.Invalid(spec.Child("clusterIPs").Index(i), "", fmt.Sprintf("failed to allocate a serviceIP: range %s is full", r.Prefix()))}
		}
		out[i] = ip.String()
		a.ips.Add(out[i]) // keep concurrent creates from racing for the same pick
		*picked = append(*picked, serviceIPKeys+out[i])
	}
	svc.Spec.ClusterIPs, svc.Spec.ClusterIP = out, out[0]
	return nil
}

func needsNodePorts(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case typeNodePort:
		return true
	case typeLB:
		return svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts
	}
	return false
}

func (a *serviceAllocator) assignNodePorts(svc, prev *corev1.Service, requested map[string]bool, picked *[]string) field.ErrorList {
	var errs field.ErrorList
	ports := field.NewPath("spec", "ports")
	had := map[int32]bool{}
	if prev != nil {
		for _, p := range prev.Spec.Ports {
			had[p.NodePort] = true
		}
		had[prev.Spec.HealthCheckNodePort] = true
	}
	mayHave := svc.Spec.Type == typeNodePort || svc.Spec.Type == typeLB
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		switch {
		case p.NodePort != 0 && !mayHave && had[p.NodePort]:
			p.NodePort = 0 // the type changed away from NodePort: drop it
		case p.NodePort != 0 && !mayHave:
			errs = append(errs, field.Forbidden(ports.Index(i).Child("nodePort"), fmt.Sprintf("may not be used when `type` is '%s'", svc.Spec.Type)))
		case p.NodePort != 0:
			if !a.ports.Contains(int(p.NodePort)) {
				errs = append(errs, field.Invalid(ports.Index(i).Child("nodePort"), p.NodePort,
					fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %s", a.ports)))
			} else if !had[p.NodePort] {
				requested[nodePortKey(p.NodePort)] = true
			}
		case needsNodePorts(svc):
			port, ok := a.ports.Pick(a.nodePorts)
			if !ok {
				errs = append(errs, field.Invalid(ports.Index(i).Child("nodePort"), 0, fmt.Sprintf("range %s is full", a.ports)))
				continue
			}
			p.NodePort = int32(port)
			a.nodePorts.Add(strconv.Itoa(port))
			*picked = append(*picked, nodePortKey(p.NodePort))
		}
	}
	hc := field.NewPath("spec", "healthCheckNodePort")
	wantHC := svc.Spec.Type == typeLB && svc.Spec.ExternalTrafficPolicy == etpLocal
	switch {
	case !wantHC && svc.Spec.HealthCheckNodePort != 0 && had[svc.Spec.HealthCheckNodePort]:
		svc.Spec.HealthCheckNodePort = 0
	case !wantHC && svc.Spec.HealthCheckNodePort != 0:
		errs = append(errs, field.Invalid(hc, svc.Spec.HealthCheckNodePort, "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
	case wantHC && svc.Spec.HealthCheckNodePort == 0:
		port, ok := a.ports.Pick(a.nodePorts)
		if !ok {
			errs = append(errs, field.Invalid(hc, 0, fmt.Sprintf("range %s is full", a.ports)))
			break
		}
		svc.Spec.HealthCheckNodePort = int32(port)
		a.nodePorts.Add(strconv.Itoa(port))
		*picked = append(*picked, nodePortKey(svc.Spec.HealthCheckNodePort))
	case wantHC:
		if !a.ports.Contains(int(svc.Spec.HealthCheckNodePort)) {
			errs = append(errs, field.Invalid(hc, svc.Spec.HealthCheckNodePort, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %s", a.ports)))
		} else if !had[svc.Spec.HealthCheckNodePort] {
			requested[nodePortKey(svc.Spec.HealthCheckNodePort)] = true
		}
	}
	return errs
}

func nodePortKey(p int32) string { return nodePortKeys + strconv.Itoa(int(p)) }

// serviceKeys lists the claim keys a service holds.
func serviceKeys(svc *corev1.Service) map[string]string {
	owner := svc.Namespace + "/" + svc.Name
	keys := map[string]string{}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip != "" && ip != headlessService {
			keys[serviceIPKeys+ip] = owner
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			keys[nodePortKey(p.NodePort)] = owner
		}
	}
	if svc.Spec.HealthCheckNodePort != 0 {
		keys[nodePortKey(svc.Spec.HealthCheckNodePort)] = owner
	}
	return keys
}

func (a *serviceAllocator) keepAllocated(next, cur runtime.Object) {
	n, c := next.(*corev1.Service), cur.(*corev1.Service)
	if n.Spec.Type != typeExternal && c.Spec.Type != typeExternal {
		if n.Spec.ClusterIP == "" && len(n.Spec.ClusterIPs) == 0 {
			n.Spec.ClusterIP, n.Spec.ClusterIPs = c.Spec.ClusterIP, c.Spec.ClusterIPs
		}
		if len(n.Spec.IPFamilies) == 0 {
			n.Spec.IPFamilies = c.Spec.IPFamilies
		}
		if n.Spec.IPFamilyPolicy == nil || (*n.Spec.IPFamilyPolicy == singleStack && c.Spec.IPFamilyPolicy != nil && len(n.Spec.IPFamilies) == len(c.Spec.IPFamilies)) {
			n.Spec.IPFamilyPolicy = c.Spec.IPFamilyPolicy
		}
	}
	if needsNodePorts(n) || n.Spec.Type == typeLB {
		for i := range n.Spec.Ports {
			np := &n.Spec.Ports[i]
			if np.NodePort != 0 {
				continue
			}
			for _, cp := range c.Spec.Ports {
				if cp.NodePort != 0 && cp.Port == np.Port && cp.Protocol == np.Protocol {
					np.NodePort = cp.NodePort
				}
			}
		}
	}
	dropTypeDependentFields(n, c)
	if n.Spec.HealthCheckNodePort == 0 && n.Spec.Type == typeLB && n.Spec.ExternalTrafficPolicy == etpLocal {
		n.Spec.HealthCheckNodePort = c.Spec.HealthCheckNodePort
	}
}

func (a *serviceAllocator) release(obj runtime.Object) storage.Claims {
	var c storage.Claims
	keys := serviceKeys(obj.(*corev1.Service))
	a.ipAddressClaims(keys)
	for k := range keys {
		c.Release = append(c.Release, k)
	}
	return c
}

func (a *serviceAllocator) setFor(key string) (*allocator.Set, string) {
	if ip, ok := a.ipFromClaim(key); ok {
		return a.ips, ip
	}
	if v, ok := strings.CutPrefix(key, serviceIPKeys); ok {
		return a.ips, v
	}
	return a.nodePorts, strings.TrimPrefix(key, nodePortKeys)
}

func (a *serviceAllocator) taken(keys []string) {
	for _, k := range keys {
		set, v := a.setFor(k)
		set.Add(v)
	}
}

func (a *serviceAllocator) committed(c storage.Claims) {
	for k := range c.Put {
		set, v := a.setFor(k)
		set.Add(v)
	}
	for _, k := range c.Release {
		set, v := a.setFor(k)
		set.Remove(v)
	}
}

func (a *serviceAllocator) abandon(c storage.Claims, requested map[string]bool, keep []string) {
	// A ClusterIP is claimed under two keys (its claim and its IPAddress
	// object); a value another writer holds under either key stays taken, or
	// the next attempt would pick it again.
	type value struct {
		set *allocator.Set
		v   string
	}
	kept := map[value]bool{}
	for _, k := range keep {
		set, v := a.setFor(k)
		kept[value{set, v}] = true
	}
	var drop []string
	for k := range c.Put {
		set, v := a.setFor(k)
		if !requested[k] && !kept[value{set, v}] {
			drop = append(drop, k)
		}
	}
	a.forget(drop)
}

// forget frees picked keys in the hint sets.
func (a *serviceAllocator) forget(keys []string) {
	for _, k := range keys {
		set, v := a.setFor(k)
		set.Remove(v)
	}
}

// describeTaken names the field of obj that holds the value of key, with
// kube-apiserver's field paths and messages.
func (a *serviceAllocator) describeTaken(obj runtime.Object, key string) field.ErrorList {
	svc := obj.(*corev1.Service)
	if ip, ok := a.ipFromClaim(key); ok {
		key = serviceIPKeys + ip
	}
	if v, ok := strings.CutPrefix(key, serviceIPKeys); ok {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), svc.Spec.ClusterIPs, fmt.Sprintf("failed to allocate IP %s: provided IP is already allocated", v))}
	}
	const taken = "provided port is already allocated"
	for i, p := range svc.Spec.Ports {
		if nodePortKey(p.NodePort) == key {
			return field.ErrorList{field.Invalid(field.NewPath("spec", "ports").Index(i).Child("nodePort"), p.NodePort, taken)}
		}
	}
	if nodePortKey(svc.Spec.HealthCheckNodePort) == key {
		return field.ErrorList{field.Invalid(field.NewPath("spec", "healthCheckNodePort"), svc.Spec.HealthCheckNodePort, taken)}
	}
	return field.ErrorList{field.Invalid(field.NewPath("spec"), strings.TrimPrefix(key, nodePortKeys), taken)}
}

// dropTypeDependentFields clears, when the type changes, the fields the new
// type may not have — but only those the client left as they were, so a
// client that sets them explicitly still gets a validation error.
func dropTypeDependentFields(n, c *corev1.Service) {
	if n.Spec.Type == c.Spec.Type {
		return
	}
	if n.Spec.Type == typeExternal {
		// ExternalName services have no cluster IPs; drop the ones the
		// client carried over unchanged (apply of a type change).
		if n.Spec.ClusterIP == c.Spec.ClusterIP {
			n.Spec.ClusterIP = ""
		}
		if apiequality.Semantic.DeepEqual(n.Spec.ClusterIPs, c.Spec.ClusterIPs) {
			n.Spec.ClusterIPs = nil
		}
		if apiequality.Semantic.DeepEqual(n.Spec.IPFamilies, c.Spec.IPFamilies) {
			n.Spec.IPFamilies = nil
		}
		if apiequality.Semantic.DeepEqual(n.Spec.IPFamilyPolicy, c.Spec.IPFamilyPolicy) {
			n.Spec.IPFamilyPolicy = nil
		}
		if n.Spec.InternalTrafficPolicy != nil && apiequality.Semantic.DeepEqual(n.Spec.InternalTrafficPolicy, c.Spec.InternalTrafficPolicy) {
			n.Spec.InternalTrafficPolicy = nil
		}
	}
	external := n.Spec.Type == typeNodePort || n.Spec.Type == typeLB
	if !external {
		for i := range n.Spec.Ports {
			for _, cp := range c.Spec.Ports {
				if n.Spec.Ports[i].NodePort != 0 && n.Spec.Ports[i].NodePort == cp.NodePort {
					n.Spec.Ports[i].NodePort = 0
				}
			}
		}
		if n.Spec.ExternalTrafficPolicy == c.Spec.ExternalTrafficPolicy {
			n.Spec.ExternalTrafficPolicy = ""
		}
	}
	if n.Spec.Type != typeLB {
		if apiequality.Semantic.DeepEqual(n.Spec.AllocateLoadBalancerNodePorts, c.Spec.AllocateLoadBalancerNodePorts) {
			n.Spec.AllocateLoadBalancerNodePorts = nil
		}
		if n.Spec.HealthCheckNodePort == c.Spec.HealthCheckNodePort {
			n.Spec.HealthCheckNodePort = 0
		}
		if n.Spec.LoadBalancerClass != nil && apiequality.Semantic.DeepEqual(n.Spec.LoadBalancerClass, c.Spec.LoadBalancerClass) {
			n.Spec.LoadBalancerClass = nil
		}
		// Load-balancer status belongs to LoadBalancer services only.
		n.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	}
}
