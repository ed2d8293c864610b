package endpointslice

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// plan is the writes of one sync, applied creates first and deletes last so
// that endpoints moving between slices never vanish for a watcher.
type plan struct {
	create []*discoveryv1.EndpointSlice
	update []*discoveryv1.EndpointSlice
	delete []*discoveryv1.EndpointSlice
}

func (p plan) empty() bool { return len(p.create)+len(p.update)+len(p.delete) == 0 }

// planner turns desired groups and the existing slices of one Service into
// the fewest writes: it keeps every slice whose content is unchanged,
// rewrites slices whose endpoints changed (and fills them first), packs the
// rest into new full slices, and puts a small remainder into one existing
// slice with room rather than a new one.
type planner struct {
	svc     *corev1.Service
	max     int
	trigger time.Time
	labels  map[string]string
	owner   metav1.OwnerReference
}

func newPlanner(svc *corev1.Service, max int, trigger time.Time) *planner {
	return &planner{
		svc: svc, max: max, trigger: trigger,
		labels: sliceLabels(svc),
		owner:  *metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service")),
	}
}

// work is one slice being planned: an existing one (orig set) or a new one.
type work struct {
	orig      *discoveryv1.EndpointSlice
	group     *group
	endpoints []discoveryv1.Endpoint
	changed   bool
}

func (p *planner) plan(groups map[groupKey]*group, existing []*discoveryv1.EndpointSlice) plan {
	var out plan
	byGroup := map[groupKey][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		if !p.ownedBy(s) {
			// A slice of an earlier Service of the same name: there is no
			// garbage collector to remove it.
			out.delete = append(out.delete, s)
			continue
		}
		k := groupKey{addressType: s.AddressType, ports: portsKey(s.Ports)}
		byGroup[k] = append(byGroup[k], s)
	}
	keys := slices.Collect(maps.Keys(groups))
	for k := range byGroup {
		if groups[k] == nil {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.addressType, b.addressType), strings.Compare(a.ports, b.ports))
	})

	var works []*work
	for _, k := range keys {
		g := groups[k]
		if g == nil {
			g = &group{key: k}
		}
		works = append(works, p.planGroup(g, byGroup[k])...)
	}

	var creates, emptied []*work
	for _, w := range works {
		switch {
		case w.orig == nil:
			creates = append(creates, w)
		case len(w.endpoints) == 0:
			emptied = append(emptied, w)
		case w.changed:
			if s := p.build(w); !sameContent(s, w.orig) {
				out.update = append(out.update, s)
			}
		}
	}
	// An emptied slice of the right family becomes a new slice by update:
	// one write instead of a create and a delete.
	for _, w := range creates {
		i := slices.IndexFunc(emptied, func(e *work) bool { return e.orig.AddressType == w.group.key.addressType })
		if i < 0 {
			out.create = append(out.create, p.build(w))
			continue
		}
		w.orig = emptied[i].orig
		emptied = slices.Delete(emptied, i, i+1)
		out.update = append(out.update, p.build(w))
	}
	for _, w := range emptied {
		out.delete = append(out.delete, w.orig)
	}
	return out
}

// planGroup places the desired endpoints of one group into its existing
// slices (sorted by name for determinism) and new ones.
func (p *planner) planGroup(g *group, existing []*discoveryv1.EndpointSlice) []*work {
	slices.SortFunc(existing, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	placed := make(map[string]bool, len(g.endpoints))
	works := make([]*work, 0, len(existing)+1)
	for _, s := range existing {
		w := &work{orig: s, group: g, endpoints: make([]discoveryv1.Endpoint, 0, len(s.Endpoints)), changed: p.metaChanged(s)}
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			k := endpointKey(ep)
			want, ok := g.endpoints[k]
			if !ok || placed[k] || len(w.endpoints) == p.max {
				// Gone, a duplicate, or over a lowered limit (then placed
				// again below, like a new endpoint).
				w.changed = true
				continue
			}
			placed[k] = true
			if !apiequality.Semantic.DeepEqual(*ep, want) {
				w.changed = true
			}
			w.endpoints = append(w.endpoints, want)
		}
		works = append(works, w)
	}

	var left []string
	for k := range g.endpoints {
		if !placed[k] {
			left = append(left, k)
		}
	}
	if len(left) == 0 {
		return works
	}
	slices.Sort(left)
	take := func(w *work, n int) {
		for _, k := range left[:n] {
			w.endpoints = append(w.endpoints, g.endpoints[k])
		}
		left = left[n:]
		w.changed = true
	}

	// Slices that are rewritten anyway take new endpoints for free.
	for _, w := range works {
		if w.changed && len(left) > 0 && len(w.endpoints) < p.max {
			take(w, min(p.max-len(w.endpoints), len(left)))
		}
	}
	for len(left) >= p.max {
		w := &work{group: g}
		take(w, p.max)
		works = append(works, w)
	}
	if len(left) == 0 {
		return works
	}
	// The remainder goes into the fullest unchanged slice it fits, so one
	// slice is rewritten; only if none fits is a new slice created.
	var best *work
	for _, w := range works {
		if !w.changed && p.max-len(w.endpoints) >= len(left) && (best == nil || len(w.endpoints) > len(best.endpoints)) {
			best = w
		}
	}
	if best == nil {
		best = &work{group: g}
		works = append(works, best)
	}
	take(best, len(left))
	return works
}

// ownedBy reports whether a slice of ours belongs to this incarnation of the
// Service (or to none: a managed slice without an owner is adopted).
func (p *planner) ownedBy(s *discoveryv1.EndpointSlice) bool {
	ref := metav1.GetControllerOfNoCopy(s)
	return ref == nil || ref.UID == p.svc.UID
}

func (p *planner) metaChanged(s *discoveryv1.EndpointSlice) bool {
	return !maps.Equal(s.Labels, p.labels) ||
		len(s.OwnerReferences) != 1 || !apiequality.Semantic.DeepEqual(s.OwnerReferences[0], p.owner)
}

// build renders a work item as the slice to send.
func (p *planner) build(w *work) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{AddressType: w.group.key.addressType}
	if w.orig != nil {
		s.ObjectMeta = *w.orig.ObjectMeta.DeepCopy()
	} else {
		s.GenerateName = p.svc.Name + "-"
		s.Namespace = p.svc.Namespace
	}
	s.Labels = maps.Clone(p.labels)
	s.OwnerReferences = []metav1.OwnerReference{p.owner}
	if !p.trigger.IsZero() {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[corev1.EndpointsLastChangeTriggerTime] = p.trigger.UTC().Format(time.RFC3339Nano)
	} else {
		// A write with no pod or Service change behind it (a repair, a
		// rebalance) must not carry the last one's time: proxies observe
		// every update's trigger time, and the old one would count as a
		// change that took from then until now to program.
		delete(s.Annotations, corev1.EndpointsLastChangeTriggerTime)
	}
	s.Ports = slices.Clone(w.group.ports)
	s.Endpoints = slices.Clone(w.endpoints)
	slices.SortFunc(s.Endpoints, func(a, b discoveryv1.Endpoint) int {
		return strings.Compare(endpointKey(&a), endpointKey(&b))
	})
	return s
}

// sameContent compares what consumers read (labels, owner, family, ports,
// endpoints in any order); annotations alone never cause a write.
func sameContent(a, b *discoveryv1.EndpointSlice) bool {
	if a.AddressType != b.AddressType || !maps.Equal(a.Labels, b.Labels) ||
		!apiequality.Semantic.DeepEqual(a.OwnerReferences, b.OwnerReferences) ||
		len(a.Ports) != len(b.Ports) || portsKey(a.Ports) != portsKey(b.Ports) ||
		len(a.Endpoints) != len(b.Endpoints) {
		return false
	}
	byKey := make(map[string]*discoveryv1.Endpoint, len(b.Endpoints))
	for i := range b.Endpoints {
		byKey[endpointKey(&b.Endpoints[i])] = &b.Endpoints[i]
	}
	if len(byKey) != len(b.Endpoints) {
		return false // duplicates in b
	}
	for i := range a.Endpoints {
		o := byKey[endpointKey(&a.Endpoints[i])]
		if o == nil || !apiequality.Semantic.DeepEqual(a.Endpoints[i], *o) {
			return false
		}
	}
	return true
}

// sliceLabels: the Service's own labels (so that labels such as
// service.kubernetes.io/service-proxy-name reach the proxies that filter
// slices by them), plus ours.
func sliceLabels(svc *corev1.Service) map[string]string {
	l := make(map[string]string, len(svc.Labels)+3)
	for k, v := range svc.Labels {
		switch k {
		case discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy, corev1.IsHeadlessService:
			continue
		}
		l[k] = v
	}
	l[discoveryv1.LabelServiceName] = svc.Name
	l[discoveryv1.LabelManagedBy] = ControllerName
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		l[corev1.IsHeadlessService] = ""
	}
	return l
}
