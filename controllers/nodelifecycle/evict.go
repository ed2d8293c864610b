package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/controllers/internal/nodefit"
)

// ReasonTaintManagerEviction is the event reason upstream's taint manager
// gives a pod it deletes.
const ReasonTaintManagerEviction = "TaintManagerEviction"

// evictionDelay is how long a pod may stay on a node carrying taint
// (NoExecute): the smallest tolerationSeconds among the pod's tolerations
// that tolerate it, as upstream's taint manager takes it. forever is true
// when a tolerating toleration has no tolerationSeconds; a pod with no
// tolerating toleration goes at once (delay 0).
func evictionDelay(pod *corev1.Pod, taint *corev1.Taint) (delay time.Duration, forever bool) {
	tolerated := false
	var least int64
	for i := range pod.Spec.Tolerations {
		tol := &pod.Spec.Tolerations[i]
		if !nodefit.Tolerates(tol, taint) {
			continue
		}
		if tol.TolerationSeconds == nil {
			return 0, true
		}
		if s := max(*tol.TolerationSeconds, 0); !tolerated || s < least {
			least = s
		}
		tolerated = true
	}
	return time.Duration(least) * time.Second, false
}

// noExecuteTaint is the node's unreachable or not-ready NoExecute taint
// (nil: none).
func noExecuteTaint(node *corev1.Node) *corev1.Taint {
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if (t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady) && t.Effect == corev1.TaintEffectNoExecute {
			return t
		}
	}
	return nil
}

// evictPods deletes the pods of an unreachable or not-ready node whose
// tolerations of its NoExecute taint ran out, as upstream's taint manager does:
// the deletion makes them terminating (their endpoints leave the Services'
// ready set and are marked terminating) and the API removes them once the
// node agent confirms, or at once when their grace period is 0. It returns
// how long until the next pod's toleration runs out (0: none pending), so
// the node is looked at again exactly then.
func (c *Controller) evictPods(ctx context.Context, node *corev1.Node, now time.Time) (time.Duration, error) {
	taint := noExecuteTaint(node)
	if taint == nil {
		return 0, nil
	}
	since := now
	if taint.TimeAdded != nil {
		since = taint.TimeAdded.Time
	}
	objs, err := c.pods.ByIndex(podsByNode, node.Name)
	if err != nil {
		return 0, fmt.Errorf("list pods of node %s: %w", node.Name, err)
	}
	var next time.Duration
	var errs []error
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		delay, forever := evictionDelay(pod, taint)
		if forever {
			continue
		}
		if left := since.Add(delay).Sub(now); left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		// The UID precondition keeps a pod recreated under the same name
		// since the informer saw it from being deleted in its place.
		err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("evict pod %s/%s from node %s (%s): %w", pod.Namespace, pod.Name, node.Name, taint.Key, err))
			continue
		}
		c.log.Info("evicted pod", "pod", pod.Namespace+"/"+pod.Name, "node", node.Name, "taint", taint.Key, "tolerated", delay)
		c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonTaintManagerEviction, "Marking for deletion Pod %s/%s", pod.Namespace, pod.Name)
	}
	return next, errors.Join(errs...)
}
