package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition reasons and messages, as upstream writes them where upstream
// has one.
const (
	ReasonNodeStatusUnknown = "NodeStatusUnknown"
	ReasonNodeLeaseRenewed  = "NodeLeaseRenewed"
	ReasonNodeNotReady      = "NodeNotReady"
	messageStatusUnknown    = "Kubelet stopped posting node status."
	messageLeaseRenewed     = "Node lease renewed."
)

// unreachableTaints are what an unreachable node carries: NoSchedule keeps
// new pods off, NoExecute announces it to pods that tolerate it for a while.
var unreachableTaints = []corev1.Taint{
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute},
}

// notReadyTaints are what a node that reports Ready=False carries, the
// same pair under node.kubernetes.io/not-ready, as upstream sets them.
var notReadyTaints = []corev1.Taint{
	{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute},
}

// deadlineSlack lets the deadline check run just after the grace period
// ended rather than a hair before it.
const deadlineSlack = 10 * time.Millisecond

func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		delete(c.health, name)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	lease, err := c.leases.Leases(LeaseNamespace).Get(name)
	if apierrors.IsNotFound(err) {
		lease = nil
	} else if err != nil {
		return fmt.Errorf("get lease %s/%s: %w", LeaseNamespace, name, err)
	}

	now := time.Now()
	observed := c.observe(node, lastHeartbeat(node, lease), now)
	if left := observed.Add(c.opts.NodeMonitorGracePeriod).Sub(now); left > 0 {
		c.setUnreachable(name, false)
		c.queue.AddAfter(name, left+deadlineSlack)
		node, err := c.markReachable(ctx, node, lease)
		if err != nil {
			return err
		}
		return c.syncNotReady(ctx, node, now)
	}
	c.setUnreachable(name, true)
	return c.markUnreachable(ctx, node, now)
}

// lastHeartbeat is the newest sign of life of a node. Creation counts, so
// that a node that just registered is not marked before it could renew.
func lastHeartbeat(node *corev1.Node, lease *coordinationv1.Lease) time.Time {
	t := node.CreationTimestamp.Time
	if ready := readyCondition(node); ready != nil && ready.LastHeartbeatTime.After(t) {
		t = ready.LastHeartbeatTime.Time
	}
	if lease != nil && lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(t) {
		t = lease.Spec.RenewTime.Time
	}
	return t
}

// observe records the heartbeat and returns when it was (first) seen.
func (c *Controller) observe(node *corev1.Node, signal, now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.health[node.Name]
	switch {
	case h == nil:
		h = &health{signal: signal, observed: now}
		// A node marked before a restart stays marked until it really
		// heartbeats again; otherwise every restart would flip it back to
		// Ready for a grace period.
		if markedByUs(node) && signal.Before(now) {
			h.observed = signal
		}
		c.health[node.Name] = h
	case signal.After(h.signal):
		h.signal, h.observed = signal, now
	}
	return h.observed
}

func (c *Controller) setUnreachable(name string, unreachable bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.health[name]; h != nil {
		h.unreachable = unreachable
	}
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// markedByUs reports whether this controller set the node's Ready to Unknown.
func markedByUs(node *corev1.Node) bool {
	ready := readyCondition(node)
	return ready != nil && ready.Status == corev1.ConditionUnknown && ready.Reason == ReasonNodeStatusUnknown
}

// setReady replaces (or adds) the node's Ready condition.
func setReady(node *corev1.Node, cond corev1.NodeCondition) {
	if ready := readyCondition(node); ready != nil {
		*ready = cond
		return
	}
	node.Status.Conditions = append(node.Status.Conditions, cond)
}

// markUnreachable sets Ready Unknown, taints the node, takes its pods out
// of service and evicts those whose toleration of the taint ran out. Each
// step checks first, so a retry only redoes what failed.
func (c *Controller) markUnreachable(ctx context.Context, node *corev1.Node, at time.Time) error {
	now := metav1.Now()
	if ready := readyCondition(node); ready == nil || ready.Status != corev1.ConditionUnknown {
		upd := node.DeepCopy()
		cond := corev1.NodeCondition{
			Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
			Reason: ReasonNodeStatusUnknown, Message: messageStatusUnknown,
			LastTransitionTime: now,
		}
		if ready != nil {
			// The heartbeat stays what the node last posted: that is the
			// evidence of when it was last alive.
			cond.LastHeartbeatTime = ready.LastHeartbeatTime
		}
		setReady(upd, cond)
		out, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("set node %s Ready=Unknown: %w", node.Name, err)
		}
		node = out
		c.log.Warn("node stopped heartbeating; marked unreachable", "node", node.Name, "grace", c.opts.NodeMonitorGracePeriod)
		c.recorder.Eventf(node, corev1.EventTypeNormal, ReasonNodeNotReady, "Node %s status is now: NodeNotReady", node.Name)
	}
	// An unreachable node's not-ready taints give way to the unreachable
	// ones, as upstream swaps them.
	return c.takeOutOfService(ctx, node, unreachableTaints, corev1.TaintNodeNotReady, "unreachable", at)
}

// takeOutOfService gives the node taints (dropping those with key drop),
// marks its pods not ready (state says why) and evicts those whose
// toleration of its NoExecute taint ran out, looking at the node again
// when the next one's does.
func (c *Controller) takeOutOfService(ctx context.Context, node *corev1.Node, taints []corev1.Taint, drop, state string, now time.Time) error {
	node, err := c.setTaints(ctx, node, taints, drop)
	if err != nil {
		return err
	}
	if err := c.markPodsNotReady(ctx, node.Name, state); err != nil {
		return err
	}
	next, err := c.evictPods(ctx, node, now)
	if next > 0 {
		c.queue.AddAfter(node.Name, next+deadlineSlack)
	}
	return err
}

// markReachable undoes what markUnreachable did to the node itself and
// returns the node as it is now.
func (c *Controller) markReachable(ctx context.Context, node *corev1.Node, lease *coordinationv1.Lease) (*corev1.Node, error) {
	if lease != nil && lease.Spec.RenewTime != nil && markedByUs(node) {
		upd := node.DeepCopy()
		setReady(upd, corev1.NodeCondition{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: ReasonNodeLeaseRenewed, Message: messageLeaseRenewed,
			LastHeartbeatTime:  metav1.NewTime(lease.Spec.RenewTime.Time),
			LastTransitionTime: metav1.Now(),
		})
		out, err := c.client.CoreV1().Nodes().UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if err != nil {
			return nil, fmt.Errorf("set node %s Ready=True: %w", node.Name, err)
		}
		node = out
		c.log.Info("node lease renewed; marked ready", "node", node.Name)
		c.recorder.Eventf(node, corev1.EventTypeNormal, "NodeReady", "Node %s status is now: NodeReady", node.Name)
	}
	return c.setTaints(ctx, node, nil, corev1.TaintNodeUnreachable)
}

// syncNotReady handles a reachable node by what it reports itself: Ready
// False (its agent found the node's network not ready) gets the
// not-ready taints, its pods marked not ready (their endpoints leave the
// Services) and evicted once their toleration of the NoExecute taint runs
// out, as upstream does; any other Ready loses the not-ready taints.
func (c *Controller) syncNotReady(ctx context.Context, node *corev1.Node, now time.Time) error {
	ready := readyCondition(node)
	if ready == nil || ready.Status != corev1.ConditionFalse {
		_, err := c.setTaints(ctx, node, nil, corev1.TaintNodeNotReady)
		return err
	}
	return c.takeOutOfService(ctx, node, notReadyTaints, "", "not ready", now)
}

// setTaints adds the taints of want the node lacks (timeAdded now) and
// removes those with key drop ("": none), in one update if anything
// changes, and returns the node as it is now.
func (c *Controller) setTaints(ctx context.Context, node *corev1.Node, want []corev1.Taint, drop string) (*corev1.Node, error) {
	missing := missingTaints(node, want)
	upd := node.DeepCopy()
	upd.Spec.Taints = nil
	for _, t := range node.Spec.Taints {
		if drop == "" || t.Key != drop {
			upd.Spec.Taints = append(upd.Spec.Taints, t)
		}
	}
	if len(missing) == 0 && len(upd.Spec.Taints) == len(node.Spec.Taints) {
		return node, nil
	}
	now := metav1.Now()
	for _, t := range missing {
		t.TimeAdded = &now
		upd.Spec.Taints = append(upd.Spec.Taints, t)
	}
	out, err := c.client.CoreV1().Nodes().Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update taints of node %s: %w", node.Name, err)
	}
	return out, nil
}

// missingTaints are the taints of want (by key and effect) node lacks.
func missingTaints(node *corev1.Node, want []corev1.Taint) []corev1.Taint {
	var missing []corev1.Taint
	for _, want := range want {
		found := false
		for _, t := range node.Spec.Taints {
			found = found || (t.Key == want.Key && t.Effect == want.Effect)
		}
		if !found {
			missing = append(missing, want)
		}
	}
	return missing
}

// markPodsNotReady sets Ready and ContainersReady False on the node's pods,
// which takes them out of EndpointSlices.
// state says why, in the conditions' message ("unreachable", "not ready").
func (c *Controller) markPodsNotReady(ctx context.Context, nodeName, state string) error {
	objs, err := c.pods.ByIndex(podsByNode, nodeName)
	if err != nil {
		return fmt.Errorf("list pods of node %s: %w", nodeName, err)
	}
	var errs []error
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		upd := pod.DeepCopy()
		changed := false
		for i := range upd.Status.Conditions {
			cond := &upd.Status.Conditions[i]
			if (cond.Type == corev1.PodReady || cond.Type == corev1.ContainersReady) && cond.Status != corev1.ConditionFalse {
				cond.Status = corev1.ConditionFalse
				cond.Reason = ReasonNodeNotReady
				cond.Message = fmt.Sprintf("Node %s is %s", nodeName, state)
				cond.LastTransitionTime = metav1.Now()
				changed = true
			}
		}
		if !changed {
			continue
		}
		_, err := c.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("mark pod %s/%s not ready: %w", pod.Namespace, pod.Name, err))
			continue
		}
		c.log.Info("marked pod not ready", "pod", pod.Namespace+"/"+pod.Name, "node", nodeName)
	}
	return errors.Join(errs...)
}
