package daemonset

import (
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// nodeView is one node as a sync sees it.
type nodeView struct {
	name string
	// run: a new pod may be started here; keep: a pod here may stay
	// (see placement). exists: the node object exists — pods bound to a
	// node that is gone are deleted, there being no pod garbage collector.
	run, keep, exists bool
	// pods are the DaemonSet's pods bound to the node, oldest first,
	// terminating ones included (a node whose old pod is still stopping
	// gets no new one yet: a host-network daemon's ports are still taken).
	pods []*corev1.Pod
}

// live returns the pods not being deleted.
func (n *nodeView) live() []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range n.pods {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// plan is what one sync writes.
type plan struct {
	create []string      // nodes to start a pod on
	delete []*corev1.Pod // pods to delete
	failed []*corev1.Pod // failed pods among delete, reported as events
	// backoff lists nodes whose failed pod is left alone for now.
	backoff []string
}

func (p *plan) remove(pod *corev1.Pod) {
	if !slices.ContainsFunc(p.delete, func(q *corev1.Pod) bool { return q.UID == pod.UID }) {
		p.delete = append(p.delete, pod)
	}
}

// planner decides a DaemonSet's writes from a consistent view of its nodes.
// It holds no clients: everything it needs is in its fields, so the
// decisions are tested without an API.
type planner struct {
	hash     string        // the current revision's hash
	minReady time.Duration // spec.minReadySeconds
	now      time.Time
	rolling  bool // RollingUpdate (false: OnDelete)
	// maxUnavailable and maxSurge are the rolling update's budgets, scaled
	// to the number of nodes that should run the daemon; exactly one is
	// non-zero.
	maxUnavailable, maxSurge int
	// mayReplaceFailed reports whether a failed pod on the node may be
	// deleted now (false while the node's failure backoff runs).
	mayReplaceFailed func(node string) bool
}

func newPlanner(ds *appsv1.DaemonSet, hash string, desired int, now time.Time, mayReplaceFailed func(string) bool) *planner {
	p := &planner{
		hash: hash, minReady: time.Duration(ds.Spec.MinReadySeconds) * time.Second, now: now,
		mayReplaceFailed: mayReplaceFailed,
	}
	s := ds.Spec.UpdateStrategy
	if s.Type != appsv1.RollingUpdateDaemonSetStrategyType || s.RollingUpdate == nil {
		return p
	}
	p.rolling = true
	p.maxUnavailable = scaled(s.RollingUpdate.MaxUnavailable, desired)
	p.maxSurge = scaled(s.RollingUpdate.MaxSurge, desired)
	if p.maxUnavailable == 0 && p.maxSurge == 0 {
		// The API server refuses this; should it get through anyway, a
		// rollout still moves one node at a time, as upstream decides.
		p.maxUnavailable = 1
	}
	return p
}

// scaled turns a count or a percentage of total into a count; percentages
// round up, so "10%" of 3 nodes is 1, not 0. An unparsable value counts 0.
func scaled(v *intstr.IntOrString, total int) int {
	if v == nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, true)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func (pl *planner) updated(p *corev1.Pod) bool {
	return p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == pl.hash
}

// plan combines the per-node upkeep with the rolling update.
func (pl *planner) plan(nodes []*nodeView) *plan {
	p := &plan{}
	for _, n := range nodes {
		pl.upkeep(p, n)
	}
	if pl.rolling {
		if pl.maxSurge > 0 {
			pl.surge(p, nodes)
		} else {
			pl.replace(p, nodes)
		}
	}
	return p
}

// upkeep keeps one pod on every node that should have one and none
// elsewhere: a missing pod is created, a failed or finished one deleted
// (to be recreated by a later sync), extra pods deleted — the oldest
// stays. While a surge rollout runs, a node may hold one old and one new
// pod; the old one goes once the new one is available, or at once if the
// old one stopped being ready.
func (pl *planner) upkeep(p *plan, n *nodeView) {
	switch {
	case !n.exists:
		// Terminating ones too: no agent will finish their deletion.
		for _, pod := range n.pods {
			p.remove(pod)
		}
		return
	case n.run && len(n.pods) == 0:
		p.create = append(p.create, n.name)
		return
	case !n.keep:
		for _, pod := range n.live() {
			p.remove(pod)
		}
		return
	}
	var running []*corev1.Pod
	for _, pod := range n.live() {
		switch pod.Status.Phase {
		case corev1.PodFailed:
			if pl.mayReplaceFailed(n.name) {
				p.remove(pod)
				p.failed = append(p.failed, pod)
			} else {
				p.backoff = append(p.backoff, n.name)
			}
		case corev1.PodSucceeded:
			// A daemon's containers always restart; a pod that ended anyway
			// (its node shut it down) is replaced.
			p.remove(pod)
		default:
			running = append(running, pod)
		}
	}
	if pl.maxSurge == 0 {
		for _, pod := range running[min(1, len(running)):] {
			p.remove(pod)
		}
		return
	}
	var oldestNew, oldestOld *corev1.Pod
	for _, pod := range running {
		switch {
		case pl.updated(pod) && oldestNew == nil:
			oldestNew = pod
		case !pl.updated(pod) && oldestOld == nil:
			oldestOld = pod
		default:
			p.remove(pod)
		}
	}
	if oldestNew != nil && oldestOld != nil && (!ready(oldestOld) || pl.available(oldestNew)) {
		p.remove(oldestOld)
	}
}

// onNode splits a node's live pods into the updated one and the old one;
// ok is false when there is more than one of either, which upkeep sorts
// out first.
func (pl *planner) onNode(n *nodeView) (updated, old *corev1.Pod, ok bool) {
	for _, pod := range n.live() {
		if pl.updated(pod) {
			if updated != nil {
				return nil, nil, false
			}
			updated = pod
		} else {
			if old != nil {
				return nil, nil, false
			}
			old = pod
		}
	}
	return updated, old, true
}

// replace is the rolling update without surge: old pods are deleted (and
// then recreated from the current template by upkeep) only while fewer
// than maxUnavailable of the daemon's nodes are without an available pod.
// A node counts as unavailable while its pod is missing, stopping, not yet
// available, or doubled; an old pod that is itself unavailable is
// replaced at once, costing nothing.
func (pl *planner) replace(p *plan, nodes []*nodeView) {
	unavailable := 0
	var candidates []*corev1.Pod
	for _, n := range nodes {
		if !n.run {
			// Upkeep deletes what runs where it may not stay; where a new
			// taint only keeps new pods away, the old pod is left running:
			// replacing it would leave the node without one.
			continue
		}
		upd, old, ok := pl.onNode(n)
		switch {
		case !ok, upd == nil && old == nil, upd != nil && old != nil:
			unavailable++
		case upd != nil:
			if !pl.available(upd) {
				unavailable++
			}
		case !pl.available(old):
			p.remove(old)
		case unavailable < pl.maxUnavailable:
			candidates = append(candidates, old)
		}
	}
	budget := max(pl.maxUnavailable-unavailable, 0)
	for _, pod := range candidates[:min(budget, len(candidates))] {
		p.remove(pod)
	}
}

// surge is the rolling update with maxSurge: a new pod is started beside
// the old one on at most maxSurge nodes at a time (at once where the old
// pod is unavailable anyway), and the old one is deleted when the new one
// is available.
func (pl *planner) surge(p *plan, nodes []*nodeView) {
	surging := 0
	var candidates []string
	for _, n := range nodes {
		if !n.run {
			continue // as in replace
		}
		upd, old, ok := pl.onNode(n)
		switch {
		case !ok:
			surging++
		case old == nil:
			// Nothing to replace; upkeep creates a missing pod.
		case upd == nil:
			switch {
			case !pl.available(old):
				p.create = append(p.create, n.name)
			case surging < pl.maxSurge:
				candidates = append(candidates, n.name)
			}
		case !pl.available(upd):
			surging++
		default:
			p.remove(old)
		}
	}
	budget := max(pl.maxSurge-surging, 0)
	p.create = append(p.create, candidates[:min(budget, len(candidates))]...)
}

// ready reports the pod's Ready condition.
func ready(p *corev1.Pod) bool {
	_, ok := readySince(p)
	return ok
}

func readySince(p *corev1.Pod) (time.Time, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time, c.Status == corev1.ConditionTrue
		}
	}
	return time.Time{}, false
}

// available: ready for at least minReadySeconds.
func (pl *planner) available(p *corev1.Pod) bool {
	since, ok := readySince(p)
	return ok && (pl.minReady == 0 || !since.Add(pl.minReady).After(pl.now))
}

// nextAvailable is how long until a ready pod becomes available, the
// earliest over nodes; 0 when none is waiting. A sync at that moment is
// what moves a rollout with minReadySeconds on: nothing else changes then.
func (pl *planner) nextAvailable(nodes []*nodeView) time.Duration {
	var wait time.Duration
	for _, n := range nodes {
		for _, pod := range n.live() {
			since, ok := readySince(pod)
			if !ok || pl.available(pod) {
				continue
			}
			if d := since.Add(pl.minReady).Sub(pl.now); wait == 0 || d < wait {
				wait = d
			}
		}
	}
	return wait
}

// status counts what `kubectl get ds` and `kubectl rollout status` show,
// as upstream counts it: for each node that should run the daemon, its
// oldest pod (terminating ones included, so a node being rolled shows as
// not updated until its old pod is gone).
func (pl *planner) status(ds *appsv1.DaemonSet, nodes []*nodeView) appsv1.DaemonSetStatus {
	s := appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, CollisionCount: ds.Status.CollisionCount}
	for _, n := range nodes {
		if !n.run {
			if len(n.pods) > 0 {
				s.NumberMisscheduled++
			}
			continue
		}
		s.DesiredNumberScheduled++
		if len(n.pods) == 0 {
			continue
		}
		s.CurrentNumberScheduled++
		pod := n.pods[0]
		if ready(pod) {
			s.NumberReady++
			if pl.available(pod) {
				s.NumberAvailable++
			}
		}
		if pl.updated(pod) {
			s.UpdatedNumberScheduled++
		}
	}
	s.NumberUnavailable = s.DesiredNumberScheduled - s.NumberAvailable
	return s
}

// byAge sorts pods oldest first, then by name, so that "the oldest stays"
// is the same decision in every sync.
func byAge(a, b *corev1.Pod) int {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		if a.CreationTimestamp.Before(&b.CreationTimestamp) {
			return -1
		}
		return 1
	}
	return strings.Compare(a.Name, b.Name)
}
