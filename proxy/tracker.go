package proxy

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TriggerTimeAnnotation is set by the EndpointSlice controller to the time of
// the change that caused the slice update; network programming latency is
// measured from it.
const TriggerTimeAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"

// ServiceNameLabel ties an EndpointSlice to its Service.
const ServiceNameLabel = discovery.LabelServiceName

// Tracker records the latest Services, EndpointSlices and Node seen by the
// informers and which services changed since the last sync. Its On* methods
// are the informer event handlers: they only record and nudge, never touch
// the kernel. Objects are stored by pointer and must not be mutated (informer
// cache objects never are).
type Tracker struct {
	mu       sync.Mutex
	services map[types.NamespacedName]*v1.Service
	slices   map[types.NamespacedName]map[string]*discovery.EndpointSlice
	node     *v1.Node
	// dirty maps a changed service to the earliest time one of its changes
	// was triggered (annotation) or observed.
	dirty     map[types.NamespacedName]time.Time
	nodeDirty bool
	// triggers are the last-change-trigger-times of the EndpointSlice
	// changes since the last take, for network programming latency.
	triggers map[types.NamespacedName][]trigger
	// svcDirty are the services whose Service object changed since the
	// last take; sliceChanges counts EndpointSlice changes since then.
	svcDirty     map[types.NamespacedName]struct{}
	sliceChanges int
	// started is when the tracker was created: trigger times before it
	// are history (a restart), not latency.
	started time.Time
	metrics *Metrics // nil: not counted
	nudge   func()
	now     func() time.Time
}

// trigger is one EndpointSlice change's trigger time, by address family.
type trigger struct {
	family Family
	at     time.Time
}

// NewTracker returns an empty tracker; nudge (may be nil) is called after
// every recorded change.
func NewTracker(nudge func()) *Tracker {
	if nudge == nil {
		nudge = func() {}
	}
	return &Tracker{
		services: map[types.NamespacedName]*v1.Service{},
		slices:   map[types.NamespacedName]map[string]*discovery.EndpointSlice{},
		dirty:    map[types.NamespacedName]time.Time{},
		triggers: map[types.NamespacedName][]trigger{},
		svcDirty: map[types.NamespacedName]struct{}{},
		started:  time.Now(),
		nudge:    nudge,
		now:      time.Now,
	}
}

func (t *Tracker) markLocked(n types.NamespacedName, at time.Time) {
	if old, ok := t.dirty[n]; !ok || at.Before(old) {
		t.dirty[n] = at
	}
}

// SetService records an added or updated Service.
func (t *Tracker) SetService(svc *v1.Service) {
	n := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	t.countEvent(false)
	t.mu.Lock()
	if old := t.services[n]; old != nil && old.ResourceVersion == svc.ResourceVersion && old.ResourceVersion != "" {
		t.mu.Unlock()
		return // informer resync: nothing changed
	}
	t.services[n] = svc
	t.markServiceLocked(n)
	t.mu.Unlock()
	t.nudge()
}

// DeleteService records a deleted Service.
func (t *Tracker) DeleteService(namespace, name string) {
	n := types.NamespacedName{Namespace: namespace, Name: name}
	t.countEvent(false)
	t.mu.Lock()
	if _, ok := t.services[n]; !ok {
		t.mu.Unlock()
		return
	}
	delete(t.services, n)
	t.markServiceLocked(n)
	t.mu.Unlock()
	t.nudge()
}

func sliceService(sl *discovery.EndpointSlice) (types.NamespacedName, bool) {
	name := sl.Labels[ServiceNameLabel]
	if name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: sl.Namespace, Name: name}, true
}

func (t *Tracker) triggerTime(sl *discovery.EndpointSlice) time.Time {
	now := t.now()
	if tt, ok := sliceTriggerTime(sl); ok && !tt.After(now) {
		return tt
	}
	return now
}

func sliceTriggerTime(sl *discovery.EndpointSlice) (time.Time, bool) {
	s := sl.Annotations[TriggerTimeAnnotation]
	if s == "" {
		return time.Time{}, false
	}
	tt, err := time.Parse(time.RFC3339Nano, s)
	return tt, err == nil
}

// recordTriggerLocked keeps sl's trigger time for the latency metric, as
// kube-proxy does: only for slices of an IP family, and only for changes
// made after the tracker started.
func (t *Tracker) recordTriggerLocked(n types.NamespacedName, sl *discovery.EndpointSlice) {
	var f Family
	switch sl.AddressType {
	case discovery.AddressTypeIPv4:
		f = IPv4
	case discovery.AddressTypeIPv6:
		f = IPv6
	default:
		return
	}
	if tt, ok := sliceTriggerTime(sl); ok && tt.After(t.started) {
		t.triggers[n] = append(t.triggers[n], trigger{family: f, at: tt})
	}
}

// markServiceLocked records a change of the Service object itself.
func (t *Tracker) markServiceLocked(n types.NamespacedName) {
	t.markLocked(n, t.now())
	t.svcDirty[n] = struct{}{}
	if t.metrics != nil {
		t.metrics.ServiceChangesPending.Set(float64(len(t.svcDirty)))
	}
}

// markSliceLocked records a change of one of n's EndpointSlices.
func (t *Tracker) markSliceLocked(n types.NamespacedName, at time.Time) {
	t.markLocked(n, at)
	t.sliceChanges++
	if t.metrics != nil {
		t.metrics.EndpointChangesPending.Set(float64(t.sliceChanges))
	}
}

// countEvent counts an informer event, changed or not, as kube-proxy's
// *_changes_total do.
func (t *Tracker) countEvent(slice bool) {
	switch {
	case t.metrics == nil:
	case slice:
		t.metrics.EndpointChangesTotal.Inc()
	default:
		t.metrics.ServiceChangesTotal.Inc()
	}
}

// SetEndpointSlice records an added or updated EndpointSlice.
func (t *Tracker) SetEndpointSlice(sl *discovery.EndpointSlice) {
	n, ok := sliceService(sl)
	if !ok {
		return
	}
	t.countEvent(true)
	t.mu.Lock()
	m := t.slices[n]
	if m == nil {
		m = map[string]*discovery.EndpointSlice{}
		t.slices[n] = m
	}
	if old := m[sl.Name]; old != nil && old.ResourceVersion == sl.ResourceVersion && old.ResourceVersion != "" {
		t.mu.Unlock()
		return
	}
	m[sl.Name] = sl
	t.markSliceLocked(n, t.triggerTime(sl))
	t.recordTriggerLocked(n, sl)
	t.mu.Unlock()
	t.nudge()
}

// DeleteEndpointSlice records a deleted EndpointSlice.
func (t *Tracker) DeleteEndpointSlice(sl *discovery.EndpointSlice) {
	n, ok := sliceService(sl)
	if !ok {
		return
	}
	t.countEvent(true)
	t.mu.Lock()
	m := t.slices[n]
	if _, ok := m[sl.Name]; !ok {
		t.mu.Unlock()
		return
	}
	delete(m, sl.Name)
	if len(m) == 0 {
		delete(t.slices, n)
	}
	t.markSliceLocked(n, t.now())
	// A deleted slice's annotation dates its last update, not the
	// deletion: kube-proxy drops the service's pending trigger times.
	delete(t.triggers, n)
	t.mu.Unlock()
	t.nudge()
}

// SetNode records this node's object (nil when deleted). Only changes that
// matter to the proxy (labels, addresses) mark it dirty.
func (t *Tracker) SetNode(node *v1.Node) {
	t.mu.Lock()
	changed := !sameNodeInputs(t.node, node)
	t.node = node
	if changed {
		t.nodeDirty = true
	}
	t.mu.Unlock()
	if changed {
		t.nudge()
	}
}

func sameNodeInputs(a, b *v1.Node) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Labels) != len(b.Labels) || len(a.Status.Addresses) != len(b.Status.Addresses) {
		return false
	}
	for k, v := range a.Labels {
		if b.Labels[k] != v {
			return false
		}
	}
	for i := range a.Status.Addresses {
		if a.Status.Addresses[i] != b.Status.Addresses[i] {
			return false
		}
	}
	return true
}

// Node returns this node's object as last seen (nil: not seen or deleted).
func (t *Tracker) Node() *v1.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.node
}

// Pending is the number of services changed since the last Take.
func (t *Tracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty)
}

// pendingChange is one service's inputs captured for a sync.
type pendingChange struct {
	svc    *v1.Service // nil: deleted
	slices []*discovery.EndpointSlice
	since  time.Time
}

// changes is what Take hands to the sync: the changed services' inputs and
// whether the node changed.
type changes struct {
	services    map[types.NamespacedName]pendingChange
	nodeChanged bool
	node        *v1.Node
	triggers    map[types.NamespacedName][]trigger
}

// take captures and clears the pending changes. With all, every known
// service is captured (for a rebuild after a node change).
func (t *Tracker) take(all bool) changes {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := changes{services: make(map[types.NamespacedName]pendingChange, len(t.dirty)), nodeChanged: t.nodeDirty, node: t.node, triggers: t.triggers}
	capture := func(n types.NamespacedName, since time.Time) {
		pc := pendingChange{svc: t.services[n], since: since}
		for _, sl := range t.slices[n] {
			pc.slices = append(pc.slices, sl)
		}
		c.services[n] = pc
	}
	for n, since := range t.dirty {
		capture(n, since)
	}
	if all || t.nodeDirty {
		for n := range t.services {
			if _, ok := c.services[n]; !ok {
				capture(n, time.Time{})
			}
		}
	}
	t.dirty = map[types.NamespacedName]time.Time{}
	t.nodeDirty = false
	t.triggers = map[types.NamespacedName][]trigger{}
	clear(t.svcDirty)
	t.sliceChanges = 0
	if t.metrics != nil {
		t.metrics.ServiceChangesPending.Set(0)
		t.metrics.EndpointChangesPending.Set(0)
	}
	return c
}

// requeue puts changes back after a failed sync so they are retried.
func (t *Tracker) requeue(c changes) {
	t.mu.Lock()
	for n, pc := range c.services {
		if pc.since.IsZero() {
			continue
		}
		t.markLocked(n, pc.since)
	}
	if c.nodeChanged {
		t.nodeDirty = true
	}
	// The trigger times go back too: the latency runs until the change is
	// in the kernel, which a failed sync did not achieve.
	for n, ts := range c.triggers {
		t.triggers[n] = append(ts, t.triggers[n]...)
	}
	t.mu.Unlock()
}
