package validation

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Namespace validates a Namespace on create. Namespaces are cluster-scoped
// and their names are DNS labels (they become part of DNS names such as
// svc.<namespace>.svc.cluster.local).
func Namespace(ns *corev1.Namespace) field.ErrorList {
	allErrs := validateObjectMetaCreate(&ns.ObjectMeta, false, apimachineryvalidation.ValidateNamespaceName)
	allErrs = append(allErrs, validateNamespaceSpecStatus(ns)...)
	return allErrs
}

// NamespaceUpdate validates an update of a Namespace.
func NamespaceUpdate(newNs, oldNs *corev1.Namespace) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newNs.ObjectMeta, &oldNs.ObjectMeta)
	allErrs = append(allErrs, validateNamespaceSpecStatus(newNs)...)
	return allErrs
}

func validateNamespaceSpecStatus(ns *corev1.Namespace) field.ErrorList {
	var allErrs field.ErrorList
	finPath := specPath.Child("finalizers")
	for i, f := range ns.Spec.Finalizers {
		allErrs = append(allErrs, validateNamespaceFinalizerName(string(f), finPath.Index(i))...)
	}
	switch ns.Status.Phase {
	case "", corev1.NamespaceActive, corev1.NamespaceTerminating:
	default:
		allErrs = append(allErrs, field.NotSupported(statusPath.Child("phase"), ns.Status.Phase,
			[]corev1.NamespacePhase{corev1.NamespaceActive, corev1.NamespaceTerminating}))
	}
	return allErrs
}

// validateNamespaceFinalizerName: spec.finalizers entries are qualified
// names; unprefixed ones are reserved for Kubernetes itself.
func validateNamespaceFinalizerName(name string, fldPath *field.Path) field.ErrorList {
	allErrs := validateQualifiedName(name, fldPath)
	if len(allErrs) == 0 && !strings.Contains(name, "/") && name != string(corev1.FinalizerKubernetes) {
		allErrs = append(allErrs, field.Invalid(fldPath, name,
			"name is neither a standard finalizer name nor is it fully qualified"))
	}
	return allErrs
}

// Node validates a Node on create. Nodes are cluster-scoped; their names are
// DNS subdomains.
func Node(n *corev1.Node) field.ErrorList {
	allErrs := validateObjectMetaCreate(&n.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validateNodeSpecStatus(n)...)
	return allErrs
}

// NodeUpdate validates an update of a Node (including status updates, which
// use the same rules upstream). spec.podCIDR(s) and spec.providerID may go
// from empty to a value once - that is how the IPAM controller and the
// cloud provider fill them - and are immutable after that: every node agent
// has already programmed routes for the old values.
func NodeUpdate(newNode, oldNode *corev1.Node) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newNode.ObjectMeta, &oldNode.ObjectMeta)
	allErrs = append(allErrs, validateNodeSpecStatus(newNode)...)

	const onceMsg = "node updates may not change %s except from \"\" to valid"
	if oldNode.Spec.PodCIDR != "" && newNode.Spec.PodCIDR != oldNode.Spec.PodCIDR {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("podCIDR"), fmt.Sprintf(onceMsg, "podCIDR")))
	}
	if len(oldNode.Spec.PodCIDRs) > 0 && !equalStrings(newNode.Spec.PodCIDRs, oldNode.Spec.PodCIDRs) {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("podCIDRs"), fmt.Sprintf(onceMsg, "podCIDR")))
	}
	if oldNode.Spec.ProviderID != "" && newNode.Spec.ProviderID != oldNode.Spec.ProviderID {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("providerID"), fmt.Sprintf(onceMsg, "providerID")))
	}
	if newNode.Spec.DoNotUseExternalID != oldNode.Spec.DoNotUseExternalID {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("externalID"), "may not be updated"))
	}
	return allErrs
}

func validateNodeSpecStatus(n *corev1.Node) field.ErrorList {
	var allErrs field.ErrorList

	podCIDRPath := specPath.Child("podCIDR")
	podCIDRsPath := specPath.Child("podCIDRs")
	if n.Spec.PodCIDR != "" {
		allErrs = append(allErrs, validateCIDR(n.Spec.PodCIDR, podCIDRPath)...)
	}
	cidrsValid := true
	for i, cidr := range n.Spec.PodCIDRs {
		if errs := validateCIDR(cidr, podCIDRsPath.Index(i)); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			cidrsValid = false
		}
	}
	if cidrsValid {
		allErrs = append(allErrs, validateDualStackList(n.Spec.PodCIDRs, cidrFamilyOf, "CIDR", podCIDRsPath)...)
	}
	if n.Spec.PodCIDR != "" && len(n.Spec.PodCIDRs) > 0 && n.Spec.PodCIDR != n.Spec.PodCIDRs[0] {
		allErrs = append(allErrs, field.Invalid(podCIDRsPath, n.Spec.PodCIDRs, "first value must match `podCIDR`"))
	}

	allErrs = append(allErrs, validateNodeTaints(n.Spec.Taints, specPath.Child("taints"))...)

	addrPath := statusPath.Child("addresses")
	seen := map[corev1.NodeAddress]bool{}
	for i, addr := range n.Status.Addresses {
		idxPath := addrPath.Index(i)
		if addr.Type == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("type"), ""))
		}
		if addr.Address == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("address"), ""))
		} else if addr.Type == corev1.NodeInternalIP || addr.Type == corev1.NodeExternalIP {
			allErrs = append(allErrs, validateIP(addr.Address, idxPath.Child("address"))...)
		}
		if seen[addr] {
			allErrs = append(allErrs, field.Duplicate(idxPath, addr))
		}
		seen[addr] = true
	}

	for name, q := range n.Status.Capacity {
		if q.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(statusPath.Child("capacity").Key(string(name)), q.String(), apimachineryvalidation.IsNegativeErrorMsg))
		}
	}
	for name, q := range n.Status.Allocatable {
		if q.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(statusPath.Child("allocatable").Key(string(name)), q.String(), apimachineryvalidation.IsNegativeErrorMsg))
		}
	}

	if port := n.Status.DaemonEndpoints.KubeletEndpoint.Port; port != 0 {
		allErrs = append(allErrs, validatePortNum(port, statusPath.Child("daemonEndpoints", "kubeletEndpoint", "Port"))...)
	}
	return allErrs
}

// validateNodeTaints follows validateNodeTaints upstream: keys are label
// names, values label values, effects known, and (key, effect) unique.
func validateNodeTaints(taints []corev1.Taint, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	type keyEffect struct {
		key    string
		effect corev1.TaintEffect
	}
	seen := map[keyEffect]bool{}
	for i, t := range taints {
		idxPath := fldPath.Index(i)
		allErrs = append(allErrs, validateQualifiedName(t.Key, idxPath.Child("key"))...)
		allErrs = append(allErrs, validateLabelValue(t.Value, idxPath.Child("value"))...)
		allErrs = append(allErrs, validateTaintEffect(t.Effect, false, idxPath.Child("effect"))...)
		k := keyEffect{t.Key, t.Effect}
		if seen[k] {
			dup := field.Duplicate(idxPath, t)
			dup.Detail = "taints must be unique by key and effect pair"
			allErrs = append(allErrs, dup)
		}
		seen[k] = true
	}
	return allErrs
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
