package scheduler

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
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
	if node.Spec.Unschedulable && !tolerated(pod.Spec.Tolerations, &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}) {
		return reasonUnschedulable
	}
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue // PreferNoSchedule is a preference, not a filter
		}
		if !tolerated(pod.Spec.Tolerations, t) {
			return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)
		}
	}
	if !matchesSelector(pod, node) {
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

// tolerated reports whether some toleration matches the taint.
func tolerated(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	for i := range tolerations {
		if tolerates(&tolerations[i], taint) {
			return true
		}
	}
	return false
}

// tolerates: an empty effect matches every effect; operator Exists with an
// empty key matches every taint; Equal (the default) also compares values.
func tolerates(tol *corev1.Toleration, taint *corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != taint.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != taint.Key {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return tol.Key == taint.Key && tol.Value == taint.Value
	}
	return false
}

// matchesSelector checks spec.nodeSelector and the required node affinity;
// both must hold.
func matchesSelector(pod *corev1.Pod, node *corev1.Node) bool {
	if len(pod.Spec.NodeSelector) > 0 && !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	aff := pod.Spec.Affinity
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	// Terms are ORed; an empty term list matches nothing, as upstream.
	return slices.ContainsFunc(aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms,
		func(term corev1.NodeSelectorTerm) bool { return matchesTerm(term, node) })
}

// matchesTerm ANDs a term's label expressions and field expressions; a term
// with neither matches nothing.
func matchesTerm(term corev1.NodeSelectorTerm, node *corev1.Node) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	if len(term.MatchExpressions) > 0 && !requirementsMatch(term.MatchExpressions, labels.Set(node.Labels)) {
		return false
	}
	// metadata.name is the only field upstream supports, with In and
	// NotIn. Node names can be longer than label values may be, so they
	// are compared directly rather than through a label requirement.
	for _, r := range term.MatchFields {
		if r.Key != "metadata.name" {
			return false
		}
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			if !slices.Contains(r.Values, node.Name) {
				return false
			}
		case corev1.NodeSelectorOpNotIn:
			if slices.Contains(r.Values, node.Name) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

var operators = map[corev1.NodeSelectorOperator]selection.Operator{
	corev1.NodeSelectorOpIn:           selection.In,
	corev1.NodeSelectorOpNotIn:        selection.NotIn,
	corev1.NodeSelectorOpExists:       selection.Exists,
	corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	corev1.NodeSelectorOpGt:           selection.GreaterThan,
	corev1.NodeSelectorOpLt:           selection.LessThan,
}

// requirementsMatch ANDs the requirements; a malformed one matches nothing,
// so a pod with a broken affinity stays pending rather than landing anywhere.
func requirementsMatch(reqs []corev1.NodeSelectorRequirement, set labels.Set) bool {
	for _, r := range reqs {
		op, ok := operators[r.Operator]
		if !ok {
			return false
		}
		req, err := labels.NewRequirement(r.Key, op, r.Values)
		if err != nil || !req.Matches(set) {
			return false
		}
	}
	return true
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
