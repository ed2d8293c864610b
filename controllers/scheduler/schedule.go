package scheduler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// Event reasons, as kube-scheduler records them.
const (
	ReasonFailedScheduling = "FailedScheduling"
	ReasonScheduled        = "Scheduled"
)

// pending reports whether the pod is ours to place.
func (c *Controller) pending(p *corev1.Pod) bool {
	return p.Spec.SchedulerName == c.opts.SchedulerName && p.Spec.NodeName == "" && p.DeletionTimestamp == nil &&
		(p.Status.Phase == corev1.PodPending || p.Status.Phase == "")
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // a malformed key never becomes valid
	}
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.setUnschedulable(key, false)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get pod %s: %w", key, err)
	}
	if !c.pending(pod) {
		c.setUnschedulable(key, false)
		return nil
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}

	node, reasons, already := c.place(key, pod, nodes)
	if already {
		return nil // bound a moment ago; the informer has not caught up
	}
	if node == "" {
		c.setUnschedulable(key, true)
		return c.reportUnschedulable(ctx, pod, summary(len(nodes), reasons))
	}
	c.setUnschedulable(key, false)
	return c.bind(ctx, key, pod, node)
}

// place picks the node and assumes the pod onto it, all under one lock so
// that concurrent workers see each other's choices. It returns the
// rejection reasons per node when nothing fits.
func (c *Controller) place(key string, pod *corev1.Pod, nodes []*corev1.Node) (node string, reasons map[string]int, already bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.assumed[key]; ok && a.uid == pod.UID {
		return "", nil, true
	}
	c.pruneAssumed()

	reasons = map[string]int{}
	best, bestCount := "", 0
	for _, n := range nodes {
		if why := fits(pod, n); why != "" {
			reasons[why]++
			continue
		}
		count := c.podCount(n.Name)
		if best == "" || count < bestCount || (count == bestCount && n.Name < best) {
			best, bestCount = n.Name, count
		}
	}
	if best != "" {
		c.assumed[key] = assumedPod{uid: pod.UID, node: best}
	}
	return best, reasons, false
}

// podCount counts the node's non-terminal pods, each pod once whether the
// informer already shows it there or only our assumption does.
func (c *Controller) podCount(node string) int {
	objs, _ := c.podIndex.ByIndex(podsByNode, node)
	seen := make(map[string]bool, len(objs))
	for _, obj := range objs {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		seen[p.Namespace+"/"+p.Name] = true
	}
	count := len(seen)
	for key, a := range c.assumed {
		if a.node == node && !seen[key] {
			count++
		}
	}
	return count
}

// pruneAssumed drops assumptions the informer has caught up with, and those
// of pods that went away. Called with c.mu held.
func (c *Controller) pruneAssumed() {
	for key, a := range c.assumed {
		ns, name, _ := cache.SplitMetaNamespaceKey(key)
		p, err := c.pods.Pods(ns).Get(name)
		if err != nil || p.UID != a.uid || p.Spec.NodeName != "" {
			delete(c.assumed, key)
		}
	}
}

func (c *Controller) forgetAssumed(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.assumed, key)
}

func (c *Controller) bind(ctx context.Context, key string, pod *corev1.Pod, node string) error {
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	err := c.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{})
	switch {
	case err == nil:
		c.log.Info("bound pod", "pod", key, "node", node)
		c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonScheduled, "Successfully assigned %s to %s", key, node)
		return nil
	case apierrors.IsNotFound(err):
		c.forgetAssumed(key)
		return nil
	default:
		// A conflict (bound by someone else, being deleted) is retried
		// too: by then the informer shows why and the retry is a no-op.
		c.forgetAssumed(key)
		return fmt.Errorf("bind pod %s to %s: %w", key, node, err)
	}
}

// reportUnschedulable records why the pod fits nowhere, as an event and as
// its PodScheduled condition.
func (c *Controller) reportUnschedulable(ctx context.Context, pod *corev1.Pod, msg string) error {
	c.log.Info("pod fits no node", "pod", pod.Namespace+"/"+pod.Name, "why", msg)
	c.recorder.Event(pod, corev1.EventTypeWarning, ReasonFailedScheduling, msg)

	cond := corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg,
		LastProbeTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}
	upd := pod.DeepCopy()
	found := false
	for i := range upd.Status.Conditions {
		cur := &upd.Status.Conditions[i]
		if cur.Type != corev1.PodScheduled {
			continue
		}
		found = true
		if cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
			return nil // already says so; a rewrite would only churn watchers
		}
		if cur.Status == cond.Status {
			cond.LastTransitionTime = cur.LastTransitionTime
		}
		*cur = cond
	}
	if !found {
		upd.Status.Conditions = append(upd.Status.Conditions, cond)
	}
	if _, err := c.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set PodScheduled=False on pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
