package scheduler

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/controllers/internal/nodefit"
)

// Per-node rejection reasons, worded as kube-scheduler words them so that
// tooling and people reading events recognise them.
const (
	reasonUnschedulable = "node(s) were unschedulable"
	reasonNotReady      = "node(s) were not ready"
	reasonSelector      = "node(s) didn't match Pod's node affinity/selector"
)

// fits returns "" when pod may run on node, else why not. The checks run in
// kube-scheduler's filter order and the first failure is the reason.
func fits(pod *corev1.Pod, node *corev1.Node) string {
	if node.Spec.Unschedulable && !nodefit.Tolerated(pod.Spec.Tolerations, &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}) {
		return reasonUnschedulable
	}
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue // PreferNoSchedule is a preference, not a filter
		}
		if !nodefit.Tolerated(pod.Spec.Tolerations, t) {
			return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)
		}
	}
	if !nodefit.MatchesNodeSelector(&pod.Spec, node) {
		return reasonSelector
	}
	if !isReady(node) {
		return reasonNotReady
	}
	return ""
}

func isReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// summary explains why no node fits, as kube-scheduler does: "0/3 nodes are
// available: 1 node(s) had untolerated taint {a: b}, 2 node(s) didn't match
// Pod's node affinity/selector."
func summary(total int, reasons map[string]int) string {
	if total == 0 {
		return "0/0 nodes are available: no nodes available to schedule pods."
	}
	parts := make([]string, 0, len(reasons))
	for r, n := range reasons {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	// Sorted by the reason text, not the count, so that the message is
	// stable and identical failures aggregate into one event.
	slices.SortFunc(parts, func(a, b string) int {
		return strings.Compare(a[strings.IndexByte(a, ' '):], b[strings.IndexByte(b, ' '):])
	})
	return fmt.Sprintf("0/%d nodes are available: %s.", total, strings.Join(parts, ", "))
}
