package loadbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// errRetry asks for a rate-limited retry after the event that explains it
// was recorded.
var errRetry = errors.New("requested load-balancer IP not available")

// rebuild occupies every address Services already publish, oldest Service
// first, so that on a conflict the older keeps its address.
func (c *Controller) rebuild() error {
	all, err := c.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	all = slices.DeleteFunc(all, func(s *corev1.Service) bool { return !managed(s) })
	slices.SortFunc(all, func(a, b *corev1.Service) int {
		if older(a, b) {
			return -1
		}
		return 1
	})
	c.alloc.mu.Lock()
	defer c.alloc.mu.Unlock()
	for _, svc := range all {
		key := svcKey(svc)
		for _, addr := range ingressAddrs(svc) {
			if !c.alloc.usable(addr) {
				continue
			}
			if _, dup := c.alloc.heldBy(key, familyOf(addr)); dup {
				continue
			}
			if holder, taken := c.alloc.holder(addr); taken {
				c.log.Warn("two services publish one IP; the older keeps it", "ip", addr, "keeps", holder, "loses", key)
				continue
			}
			c.alloc.assign(key, addr)
		}
	}
	c.log.Info("allocation table rebuilt", "services", len(all), "ips", len(c.alloc.owner))
	return nil
}

func svcKey(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

// older orders Services by age, then key, so every copy of the controller
// picks the same winner. creationTimestamp has one-second resolution, so
// within a second the key decides.
func older(a, b *corev1.Service) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return svcKey(a) < svcKey(b)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // a malformed key never becomes valid
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get service %s: %w", key, err)
	}
	if !managed(svc) {
		c.forget(key)
		return c.clearStatus(ctx, svc)
	}

	p := c.plan(svc)
	c.setWaiting(key, p.waiting)
	if p.freed {
		c.wakeWaiting()
	}
	for _, k := range p.evicted {
		c.queue.Add(k)
	}
	for _, e := range p.events {
		c.recorder.Event(svc, corev1.EventTypeWarning, e.reason, e.message)
	}
	if p.err != nil {
		return p.err
	}
	return c.writeStatus(ctx, svc, p.ingress)
}

// forget releases whatever key holds and wakes the Services waiting for it.
func (c *Controller) forget(key string) {
	c.alloc.mu.Lock()
	freed := c.alloc.releaseAll(key)
	c.alloc.mu.Unlock()
	c.setWaiting(key, false)
	if freed {
		c.log.Info("released load-balancer IPs", "service", key)
		c.wakeWaiting()
	}
}

// clearStatus removes our addresses from a Service that stopped being a
// LoadBalancer. The API server normally drops them itself on the type
// change; this covers servers that do not.
func (c *Controller) clearStatus(ctx context.Context, svc *corev1.Service) error {
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) == 0 {
		return nil
	}
	ours := false
	for _, a := range ingressAddrs(svc) {
		ours = ours || c.alloc.usable(a)
	}
	if !ours {
		return nil
	}
	return c.writeStatus(ctx, svc, nil)
}

type event struct{ reason, message string }

// plan is what one sync decided, under the allocator lock.
type plan struct {
	ingress []corev1.LoadBalancerIngress
	events  []event
	evicted []string // younger Services that lost an address to this one
	freed   bool     // an address went back to the pool
	waiting bool     // wants an address it could not get yet
	err     error
}

func (c *Controller) plan(svc *corev1.Service) plan {
	key := svcKey(svc)
	a := c.alloc
	a.mu.Lock()
	defer a.mu.Unlock()

	var p plan
	families := svc.Spec.IPFamilies
	if len(families) == 0 {
		families = []corev1.IPFamily{familyOf(a.pools[0].Addr())}
	}
	var want []corev1.IPFamily
	for _, f := range families {
		if a.hasPool(f) {
			want = append(want, f)
		}
	}
	if len(want) == 0 {
		p.freed = a.releaseAll(key)
		p.events = append(p.events, event{ReasonNoIPAvailable, fmt.Sprintf("no --lb-ip-pool serves the service's IP families %v", families)})
		return p
	}

	requested, ok := c.takeRequested(svc, want, &p)
	if !ok {
		return p
	}
	for _, f := range want {
		if requested.IsValid() && familyOf(requested) == f {
			continue
		}
		if _, ok := a.heldBy(key, f); ok {
			continue
		}
		if c.adoptFromStatus(svc, f, &p) {
			continue
		}
		if addr, ok := a.next(f); ok {
			a.assign(key, addr)
			continue
		}
		p.waiting = true
		p.events = append(p.events, event{ReasonNoIPAvailable, fmt.Sprintf("no free %s address left in --lb-ip-pool", f)})
	}
	for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		if !slices.Contains(want, f) && a.release(key, f) {
			p.freed = true
		}
	}
	for _, f := range want {
		if addr, ok := a.heldBy(key, f); ok {
			p.ingress = append(p.ingress, corev1.LoadBalancerIngress{IP: addr.String(), IPMode: ptr(corev1.LoadBalancerIPModeVIP)})
		}
	}
	return p
}

// takeRequested assigns spec.loadBalancerIP if set. It reports false when
// the request cannot be met; then nothing changes, because handing out
// another address than the one asked for would publish an address nobody
// expects (DNS and firewalls were set up for the requested one).
func (c *Controller) takeRequested(svc *corev1.Service, want []corev1.IPFamily, p *plan) (netip.Addr, bool) {
	if svc.Spec.LoadBalancerIP == "" {
		return netip.Addr{}, true
	}
	key := svcKey(svc)
	addr, err := netip.ParseAddr(svc.Spec.LoadBalancerIP)
	if err != nil || addr.Zone() != "" {
		p.err = errRetry
		p.events = append(p.events, event{ReasonLoadBalancerIPNotAvailable, fmt.Sprintf("spec.loadBalancerIP %q is not an IP address", svc.Spec.LoadBalancerIP)})
		return netip.Addr{}, false
	}
	addr = addr.Unmap()
	if !slices.Contains(want, familyOf(addr)) || !c.alloc.usable(addr) {
		p.err = errRetry
		p.events = append(p.events, event{ReasonLoadBalancerIPNotAvailable, fmt.Sprintf("requested IP %s is not in any --lb-ip-pool of the service's IP families", addr)})
		return netip.Addr{}, false
	}
	if holder, taken := c.alloc.holder(addr); taken && holder != key {
		p.err, p.waiting = errRetry, true
		p.events = append(p.events, event{ReasonIPAlreadyAllocated, fmt.Sprintf("requested IP %s is already allocated to service %s", addr, holder)})
		return netip.Addr{}, false
	}
	if old, ok := c.alloc.heldBy(key, familyOf(addr)); ok && old != addr {
		p.freed = true
	}
	c.alloc.assign(key, addr)
	return addr, true
}

// adoptFromStatus keeps an address the Service already publishes but the
// table does not give it: written by another copy of this controller, or
// contested with a younger Service, which then loses it.
func (c *Controller) adoptFromStatus(svc *corev1.Service, f corev1.IPFamily, p *plan) bool {
	key := svcKey(svc)
	for _, addr := range ingressAddrs(svc) {
		if familyOf(addr) != f || !c.alloc.usable(addr) {
			continue
		}
		holder, taken := c.alloc.holder(addr)
		if taken {
			other, err := c.services.Services(namespaceOf(holder)).Get(nameOf(holder))
			if err == nil && managed(other) && !older(svc, other) {
				continue
			}
			c.alloc.release(holder, f)
			p.evicted = append(p.evicted, holder)
			c.log.Warn("two services publish one IP; the older keeps it", "ip", addr, "keeps", key, "loses", holder)
		}
		c.alloc.assign(key, addr)
		return true
	}
	return false
}

func namespaceOf(key string) string {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	return ns
}

func nameOf(key string) string {
	_, name, _ := cache.SplitMetaNamespaceKey(key)
	return name
}

// writeStatus publishes ingress unless the Service already does. The write
// carries the cached resourceVersion, so a stale cache ends in a conflict
// and a retry instead of overwriting a newer status.
func (c *Controller) writeStatus(ctx context.Context, svc *corev1.Service, ingress []corev1.LoadBalancerIngress) error {
	if apiequality.Semantic.DeepEqual(svc.Status.LoadBalancer.Ingress, ingress) {
		return nil
	}
	upd := svc.DeepCopy()
	upd.Status.LoadBalancer.Ingress = ingress
	if _, err := c.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of service %s: %w", svcKey(svc), err)
	}
	if len(ingress) > 0 {
		ips := make([]string, len(ingress))
		for i, ing := range ingress {
			ips[i] = ing.IP
		}
		c.recorder.Eventf(svc, corev1.EventTypeNormal, ReasonIPAllocated, "Assigned IP %v", ips)
	}
	c.log.Info("updated load-balancer status", "service", svcKey(svc), "ingress", fmt.Sprint(ingress))
	return nil
}

func ptr[T any](v T) *T { return &v }
