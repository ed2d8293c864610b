package daemonset

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
)

// A DaemonSet's history is a ControllerRevision per template it has had,
// in the shape kube's controller writes and kubectl reads (`rollout
// history` shows it, `rollout undo` applies one): data is a strategic merge
// patch that replaces spec.template, revision counts up, the name is
// <daemonset>-<hash>, the labels are the template's plus
// controller-revision-hash, the DaemonSet is the controller owner. Pods
// carry the hash of the revision they were made from; that is how a pod is
// known to be up to date.

// revisionData is the ControllerRevision data for a template.
func revisionData(t *corev1.PodTemplateSpec) ([]byte, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("encode pod template: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decode pod template: %w", err)
	}
	m["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": m}})
}

// templateHash names a revision: FNV-1a of the revision data, and of the
// collision count, which the controller raises when another object already
// holds the name, so that the next name differs. Encoded with the
// alphabet of generated names, it is a valid label value.
func templateHash(data []byte, collisions *int32) string {
	h := fnv.New32a()
	h.Write(data)
	if collisions != nil {
		_ = binary.Write(h, binary.LittleEndian, *collisions)
	}
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// errHashCollision: a revision of this name exists with other content; the
// DaemonSet's collisionCount was raised and the sync is retried.
var errHashCollision = errors.New("controller revision name collision")

// currentRevision returns the revision of the DaemonSet's template, making
// it if it does not exist yet, and the DaemonSet's other revisions.
// owned are the revisions the DaemonSet controls. A template that comes
// back (a rollback, `kubectl rollout undo`) reuses its old revision, which
// is renumbered to be the newest.
func (c *Controller) currentRevision(ctx context.Context, ds *appsv1.DaemonSet, owned []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, []*appsv1.ControllerRevision, error) {
	data, err := revisionData(&ds.Spec.Template)
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(owned, func(a, b *appsv1.ControllerRevision) int { return int(a.Revision - b.Revision) })
	var newest int64
	var cur *appsv1.ControllerRevision
	for _, r := range owned {
		newest = max(newest, r.Revision)
		if sameData(r.Data.Raw, data) {
			cur = r // the last match is the newest
		}
	}
	switch {
	case cur == nil:
		if cur, err = c.createRevision(ctx, ds, data, newest+1); err != nil {
			return nil, nil, err
		}
	case cur.Revision < newest:
		next := cur.DeepCopy()
		next.Revision = newest + 1
		if cur, err = c.client.AppsV1().ControllerRevisions(ds.Namespace).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			return nil, nil, fmt.Errorf("renumber controller revision %s/%s: %w", next.Namespace, next.Name, err)
		}
	}
	var old []*appsv1.ControllerRevision
	for _, r := range owned {
		if r.UID != cur.UID {
			old = append(old, r)
		}
	}
	return cur, old, nil
}

// sameData compares revision data as JSON values: a revision written by
// another client may order or space its keys differently.
func sameData(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}

func (c *Controller) createRevision(ctx context.Context, ds *appsv1.DaemonSet, data []byte, number int64) (*appsv1.ControllerRevision, error) {
	hash := templateHash(data, ds.Status.CollisionCount)
	labels := make(map[string]string, len(ds.Spec.Template.Labels)+1)
	for k, v := range ds.Spec.Template.Labels {
		labels[k] = v
	}
	labels[appsv1.DefaultDaemonSetUniqueLabelKey] = hash
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name: ds.Name + "-" + hash, Namespace: ds.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: number,
	}
	revs := c.client.AppsV1().ControllerRevisions(ds.Namespace)
	out, err := revs.Create(ctx, rev, metav1.CreateOptions{})
	if err == nil || !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return nil, fmt.Errorf("create controller revision %s/%s: %w", rev.Namespace, rev.Name, err)
		}
		return out, nil
	}
	// Ours from an earlier sync the cache has not shown yet, or a real
	// collision.
	have, err := revs.Get(ctx, rev.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get controller revision %s/%s: %w", rev.Namespace, rev.Name, err)
	}
	if metav1.IsControlledBy(have, ds) && sameData(have.Data.Raw, data) {
		return have, nil
	}
	next := ds.DeepCopy()
	count := int32(1)
	if next.Status.CollisionCount != nil {
		count = *next.Status.CollisionCount + 1
	}
	next.Status.CollisionCount = &count
	if _, err := c.client.AppsV1().DaemonSets(ds.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("raise collision count of daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	return nil, fmt.Errorf("%w: %s/%s", errHashCollision, rev.Namespace, rev.Name)
}

// pruneHistory deletes the oldest revisions beyond spec.revisionHistoryLimit;
// a revision some live pod was made from is kept whatever its age (a
// rollback to it would find its pods).
func (c *Controller) pruneHistory(ctx context.Context, ds *appsv1.DaemonSet, old []*appsv1.ControllerRevision, pods []*corev1.Pod) error {
	limit := 10
	if ds.Spec.RevisionHistoryLimit != nil {
		limit = int(*ds.Spec.RevisionHistoryLimit)
	}
	if len(old) <= limit {
		return nil
	}
	inUse := map[string]bool{}
	for _, p := range pods {
		if h := p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]; h != "" && p.DeletionTimestamp == nil {
			inUse[h] = true
		}
	}
	excess := len(old) - limit
	for _, r := range old { // oldest first
		if excess == 0 {
			break
		}
		if inUse[r.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]] {
			continue
		}
		err := c.client.AppsV1().ControllerRevisions(r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &r.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete controller revision %s/%s: %w", r.Namespace, r.Name, err)
		}
		excess--
	}
	return nil
}
