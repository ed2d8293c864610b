package daemonset

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/controllers/internal/nodefit"
)

// daemonTolerations are the tolerations kube's DaemonSet controller adds to
// every daemon pod: a node daemon must keep running when its node is
// unhealthy or cordoned — it is often what the node needs to recover (a
// network plugin on a node whose network is not up yet, say).
var daemonTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// hostNetworkToleration: a host-network pod does not need the pod network,
// so it may start before the node's network plugin is ready (which is how
// a network plugin's own DaemonSet gets onto a new node).
var hostNetworkToleration = corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// podSpec is the spec of the DaemonSet's pod on a node: the template's,
// bound to the node and with the daemon tolerations it does not have yet.
func podSpec(ds *appsv1.DaemonSet, node string) corev1.PodSpec {
	spec := *ds.Spec.Template.Spec.DeepCopy()
	spec.NodeName = node
	add := daemonTolerations
	if spec.HostNetwork {
		add = append(slices.Clip(add), hostNetworkToleration)
	}
	for _, t := range add {
		if !slices.ContainsFunc(spec.Tolerations, func(have corev1.Toleration) bool {
			return have.Key == t.Key && have.Effect == t.Effect && have.Operator == t.Operator && have.Value == t.Value
		}) {
			spec.Tolerations = append(spec.Tolerations, t)
		}
	}
	return spec
}

// placement decides for one node whether the DaemonSet's pod may be
// started there (run) and whether one already there may stay (keep), as
// kube's NodeShouldRunDaemonPod: the template's nodeName, nodeSelector and
// required node affinity must match; a NoSchedule or NoExecute taint the
// pod does not tolerate keeps new pods away, and only an untolerated
// NoExecute one evicts a running pod. Readiness and resources do not
// matter: a daemon goes to every matching node.
func placement(ds *appsv1.DaemonSet, node *corev1.Node) (run, keep bool) {
	spec := podSpec(ds, node.Name)
	if n := ds.Spec.Template.Spec.NodeName; n != "" && n != node.Name {
		return false, false
	}
	if !nodefit.MatchesNodeSelector(&spec, node) {
		return false, false
	}
	run, keep = true, true
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue // PreferNoSchedule is a preference
		}
		if nodefit.Tolerated(spec.Tolerations, t) {
			continue
		}
		run = false
		if t.Effect == corev1.TaintEffectNoExecute {
			keep = false
		}
	}
	return run, keep
}

// templateGenerationLabel carries the DaemonSet's template generation on
// its pods (extensions/v1beta1's DaemonSetTemplateGenerationKey; tools
// still read it).
const templateGenerationLabel = "pod-template-generation"

// newPod is the DaemonSet's pod for a node: the template with the
// revision's hash and the template generation as labels, owned by the
// DaemonSet. It is bound to the node by spec.nodeName at once; kube's
// controller instead pins it with node affinity and lets the scheduler
// bind it, which buys nothing here (no resources are accounted).
func newPod(ds *appsv1.DaemonSet, node, hash string) *corev1.Pod {
	t := &ds.Spec.Template
	labels := make(map[string]string, len(t.Labels)+2)
	for k, v := range t.Labels {
		labels[k] = v
	}
	labels[appsv1.DefaultDaemonSetUniqueLabelKey] = hash
	if g := ds.Annotations[appsv1.DeprecatedTemplateGeneration]; g != "" {
		labels[templateGenerationLabel] = g
	}
	var annotations map[string]string
	if len(t.Annotations) > 0 {
		annotations = make(map[string]string, len(t.Annotations))
		for k, v := range t.Annotations {
			annotations[k] = v
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    ds.Name + "-",
			Namespace:       ds.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			Finalizers:      slices.Clone(t.Finalizers),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Spec: podSpec(ds, node),
	}
}
