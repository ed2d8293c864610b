package daemonset

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// settleRetry is how soon a DaemonSet whose pod cache lags our writes is
// looked at again if no pod event wakes it first.
const settleRetry = time.Second

// Event reasons, as kube's DaemonSet controller records them.
const (
	reasonCreated      = "SuccessfulCreate"
	reasonCreateFailed = "FailedCreate"
	reasonDeleted      = "SuccessfulDelete"
	reasonDeleteFailed = "FailedDelete"
	reasonFailedPod    = "FailedDaemonPod"
	reasonBadSelector  = "SelectingAll"
)

// sync converges one DaemonSet (key "namespace/name"): its dependents if it
// is gone, else its revision, its pods and its status. With nothing to do
// it writes nothing.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we queued; retrying cannot fix it
	}
	ds, err := c.sets.DaemonSets(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		c.writes.forget(key)
		return c.removeDependents(ctx, key, "")
	case err != nil:
		return fmt.Errorf("get daemonset %s: %w", key, err)
	}
	if err := c.removeDependents(ctx, key, ds.UID); err != nil {
		return err
	}
	if ds.DeletionTimestamp != nil {
		return nil // going away: its dependents go when it is gone
	}
	if !c.writes.settled(key, func(name string) *corev1.Pod { p, _ := c.pods.Pods(ns).Get(name); return p }) {
		c.queue.AddAfter(key, settleRetry)
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() {
		// The API server refuses both; a DaemonSet that selects everything
		// would adopt every pod of its namespace.
		c.recorder.Eventf(ds, corev1.EventTypeWarning, reasonBadSelector, "This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	pods, err := c.claimPods(ctx, ds, sel)
	if err != nil {
		return err
	}
	cur, old, err := c.currentRevision(ctx, ds, c.ownedRevisions(key, ds.UID))
	if err != nil {
		return err
	}
	hash := cur.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
	nodes, err := c.nodeViews(ds, pods)
	if err != nil {
		return err
	}
	desired := 0
	for _, n := range nodes {
		if n.run {
			desired++
		}
	}
	now := c.now()
	pl := newPlanner(ds, hash, desired, now, func(node string) bool {
		id := key + "/" + node
		if c.backoff.IsInBackOffSinceUpdate(id, now) {
			return false
		}
		c.backoff.Next(id, now)
		return true
	})
	p := pl.plan(nodes)
	more, applyErr := c.apply(ctx, key, ds, hash, p)
	// The status is of what this sync saw; its own writes come back as
	// pod events and the next sync counts them.
	statusErr := c.updateStatus(ctx, ds, pl.status(ds, nodes))
	pruneErr := c.pruneHistory(ctx, ds, old, pods)

	wait := pl.nextAvailable(nodes)
	for _, node := range p.backoff {
		if d := c.backoff.Get(key + "/" + node); wait == 0 || d < wait {
			wait = d
		}
	}
	switch {
	case more:
		c.queue.Add(key)
	case wait > 0:
		c.queue.AddAfter(key, wait)
	}
	return errors.Join(applyErr, statusErr, pruneErr)
}

// removeDependents deletes the pods and revisions whose controller
// reference names the DaemonSet key but not uid (the DaemonSet is gone, or
// was replaced by another of the same name): the garbage collector's work,
// which the bundled API server does not do.
func (c *Controller) removeDependents(ctx context.Context, key string, uid types.UID) error {
	var errs []error
	pods, _ := c.podIndex.ByIndex(byOwner, key)
	for _, obj := range pods {
		p := obj.(*corev1.Pod)
		if metav1.GetControllerOfNoCopy(p).UID == uid || p.DeletionTimestamp != nil {
			continue
		}
		err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		switch {
		case err == nil:
			c.log.Info("deleted pod of a deleted daemonset", "daemonset", key, "pod", p.Name)
		case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
			errs = append(errs, fmt.Errorf("delete pod %s/%s of deleted daemonset: %w", p.Namespace, p.Name, err))
		}
	}
	revs, _ := c.revIndex.ByIndex(byOwner, key)
	for _, obj := range revs {
		r := obj.(*appsv1.ControllerRevision)
		if metav1.GetControllerOfNoCopy(r).UID == uid {
			continue
		}
		err := c.client.AppsV1().ControllerRevisions(r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &r.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("delete controller revision %s/%s of deleted daemonset: %w", r.Namespace, r.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) ownedRevisions(key string, uid types.UID) []*appsv1.ControllerRevision {
	objs, _ := c.revIndex.ByIndex(byOwner, key)
	var out []*appsv1.ControllerRevision
	for _, obj := range objs {
		if r := obj.(*appsv1.ControllerRevision); metav1.GetControllerOfNoCopy(r).UID == uid {
			out = append(out, r)
		}
	}
	return out
}

// claimPods returns the DaemonSet's pods: those it controls whose labels
// match its selector, and matching pods without a controller, which it
// adopts. Controlled pods that no longer match are released.
func (c *Controller) claimPods(ctx context.Context, ds *appsv1.DaemonSet, sel labels.Selector) ([]*corev1.Pod, error) {
	all, err := c.pods.Pods(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list pods of %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	var out []*corev1.Pod
	var errs []error
	for _, p := range all {
		matches := sel.Matches(labels.Set(p.Labels))
		ref := metav1.GetControllerOfNoCopy(p)
		switch {
		case ref != nil && ref.UID == ds.UID && matches:
			out = append(out, p)
		case ref != nil && ref.UID == ds.UID:
			if p.DeletionTimestamp == nil {
				errs = append(errs, c.patchOwner(ctx, p, ownerPatch(p, ds, true)))
			}
		case ref != nil, !matches, p.DeletionTimestamp != nil:
			// Someone else's, or not ours to take.
		default:
			if err := c.patchOwner(ctx, p, ownerPatch(p, ds, false)); err != nil {
				errs = append(errs, err)
				continue
			}
			adopted := p.DeepCopy()
			adopted.OwnerReferences = append(adopted.OwnerReferences, *metav1.NewControllerRef(ds, controllerKind))
			out = append(out, adopted)
		}
	}
	return out, errors.Join(errs...)
}

// ownerPatch is the strategic merge patch that adds the DaemonSet as the
// pod's controller, or removes it (release). The pod's UID in the patch
// makes it fail on a pod that was replaced meanwhile.
func ownerPatch(p *corev1.Pod, ds *appsv1.DaemonSet, release bool) []byte {
	ref := map[string]any{"uid": ds.UID}
	if release {
		ref["$patch"] = "delete"
	} else {
		r := metav1.NewControllerRef(ds, controllerKind)
		ref = map[string]any{"apiVersion": r.APIVersion, "kind": r.Kind, "name": r.Name, "uid": r.UID, "controller": true, "blockOwnerDeletion": true}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []any{ref}, "uid": p.UID}})
	return patch
}

func (c *Controller) patchOwner(ctx context.Context, p *corev1.Pod, patch []byte) error {
	_, err := c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch owner of pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// nodeViews groups the pods by node and decides placement for every node,
// plus a view for each node the pods are bound to that no longer exists.
// Pods that finished and are being deleted are left out: nothing more
// happens to them.
func (c *Controller) nodeViews(ds *appsv1.DaemonSet, pods []*corev1.Pod) ([]*nodeView, error) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	byNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		terminal := p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
		if p.Spec.NodeName == "" || (terminal && p.DeletionTimestamp != nil) {
			continue
		}
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	views := make([]*nodeView, 0, len(nodes))
	for _, n := range nodes {
		v := &nodeView{name: n.Name, exists: true, pods: byNode[n.Name]}
		v.run, v.keep = placement(ds, n)
		delete(byNode, n.Name)
		views = append(views, v)
	}
	for name, pods := range byNode {
		views = append(views, &nodeView{name: name, pods: pods})
	}
	for _, v := range views {
		slices.SortFunc(v.pods, byAge)
	}
	slices.SortFunc(views, func(a, b *nodeView) int { return cmp.Compare(a.name, b.name) })
	return views, nil
}

// apply makes a plan's writes, at most Options.BurstReplicas of them; more
// reports that some were left for the next sync. Deletions go first: on a
// node being rolled, the new pod waits for the old one anyway.
func (c *Controller) apply(ctx context.Context, key string, ds *appsv1.DaemonSet, hash string, p *plan) (more bool, err error) {
	budget := c.opts.BurstReplicas
	deletes := p.delete[:min(budget, len(p.delete))]
	creates := p.create[:min(budget-len(deletes), len(p.create))]
	more = len(deletes) < len(p.delete) || len(creates) < len(p.create)
	for _, pod := range p.failed {
		c.recorder.Eventf(ds, corev1.EventTypeWarning, reasonFailedPod, "Found failed daemon pod %s/%s on node %s, will try to kill it", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	delErr := slowStart(len(deletes), func(i int) error {
		pod := deletes[i]
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}
		if _, err := c.nodes.Get(pod.Spec.NodeName); apierrors.IsNotFound(err) {
			// No agent will ever finish a graceful deletion on a node that
			// is gone (pod garbage collection deletes these at once too).
			opts.GracePeriodSeconds = new(int64)
		}
		err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts)
		switch {
		case err == nil:
			c.writes.wroteDelete(key, pod)
			c.recorder.Eventf(ds, corev1.EventTypeNormal, reasonDeleted, "Deleted pod: %s", pod.Name)
			return nil
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			return nil // gone or replaced meanwhile; the next sync sees which
		}
		c.recorder.Eventf(ds, corev1.EventTypeWarning, reasonDeleteFailed, "Error deleting: %v", err)
		return fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	})
	if delErr != nil {
		return more, delErr
	}
	createErr := slowStart(len(creates), func(i int) error {
		pod := newPod(ds, creates[i], hash)
		out, err := c.client.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		switch {
		case err == nil:
			c.writes.wroteCreate(key, out.Name)
			c.recorder.Eventf(ds, corev1.EventTypeNormal, reasonCreated, "Created pod: %s", out.Name)
			return nil
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			return nil // the namespace is going away and takes the DaemonSet with it
		}
		c.recorder.Eventf(ds, corev1.EventTypeWarning, reasonCreateFailed, "Error creating: %v", err)
		return fmt.Errorf("create pod of %s on node %s: %w", key, creates[i], err)
	})
	return more, createErr
}

// slowStart calls fn for 0..n-1 in batches of 1, 2, 4, ... concurrent
// calls, and stops after the first batch with an error: when the API
// refuses (a quota, a webhook, a bad template) it refuses once, not n
// times.
func slowStart(n int, fn func(i int) error) error {
	for done, batch := 0, 1; done < n; batch *= 2 {
		size := min(batch, n-done)
		errs := make([]error, size)
		var wg sync.WaitGroup
		for j := range size {
			wg.Go(func() { errs[j] = fn(done + j) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		done += size
	}
	return nil
}

// updateStatus writes the status when it changed.
func (c *Controller) updateStatus(ctx context.Context, ds *appsv1.DaemonSet, s appsv1.DaemonSetStatus) error {
	if apiequality.Semantic.DeepEqual(ds.Status, s) {
		return nil
	}
	next := ds.DeepCopy()
	next.Status = s
	if _, err := c.client.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	return nil
}
