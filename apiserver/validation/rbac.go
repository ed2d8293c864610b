package validation

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The server stores ServiceAccounts and RBAC objects so that manifests
// shipping them (a DaemonSet's ServiceAccount, its ClusterRole and binding)
// apply unchanged; it does not enforce them. They are still checked as
// kube-apiserver checks them, so that what applies here applies there.

// ServiceAccount validates a ServiceAccount (ValidateServiceAccount).
func ServiceAccount(sa *corev1.ServiceAccount) field.ErrorList {
	return validateObjectMetaCreate(&sa.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
}

// ServiceAccountUpdate validates an update of a ServiceAccount.
func ServiceAccountUpdate(newSA, oldSA *corev1.ServiceAccount) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newSA.ObjectMeta, &oldSA.ObjectMeta)
	return append(allErrs, ServiceAccount(newSA)...)
}

// rbacName is ValidateRBACName upstream: role and binding names only need
// to be usable as one URL path segment.
func rbacName(name string, _ bool) []string { return path.IsValidPathSegmentName(name) }

// Role validates a Role.
func Role(r *rbacv1.Role) field.ErrorList {
	allErrs := validateObjectMetaCreate(&r.ObjectMeta, true, rbacName)
	return append(allErrs, validatePolicyRules(r.Rules, true)...)
}

// RoleUpdate validates an update of a Role.
func RoleUpdate(newR, oldR *rbacv1.Role) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newR.ObjectMeta, &oldR.ObjectMeta)
	return append(allErrs, validatePolicyRules(newR.Rules, true)...)
}

// ClusterRole validates a ClusterRole.
func ClusterRole(r *rbacv1.ClusterRole) field.ErrorList {
	allErrs := validateObjectMetaCreate(&r.ObjectMeta, false, rbacName)
	return append(allErrs, validatePolicyRules(r.Rules, false)...)
}

// ClusterRoleUpdate validates an update of a ClusterRole.
func ClusterRoleUpdate(newR, oldR *rbacv1.ClusterRole) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newR.ObjectMeta, &oldR.ObjectMeta)
	return append(allErrs, validatePolicyRules(newR.Rules, false)...)
}

// validatePolicyRules follows ValidatePolicyRule: every rule names verbs,
// and either resources (with their groups) or, cluster-wide only,
// non-resource URLs.
func validatePolicyRules(rules []rbacv1.PolicyRule, namespaced bool) field.ErrorList {
	var allErrs field.ErrorList
	for i, rule := range rules {
		p := field.NewPath("rules").Index(i)
		if len(rule.Verbs) == 0 {
			allErrs = append(allErrs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(rule.NonResourceURLs) > 0 {
			if namespaced {
				allErrs = append(allErrs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
				allErrs = append(allErrs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(rule.APIGroups) == 0 {
			allErrs = append(allErrs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(rule.Resources) == 0 {
			allErrs = append(allErrs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return allErrs
}

// RoleBinding validates a RoleBinding.
func RoleBinding(b *rbacv1.RoleBinding) field.ErrorList {
	allErrs := validateObjectMetaCreate(&b.ObjectMeta, true, rbacName)
	return append(allErrs, validateBinding(b.RoleRef, b.Subjects, true)...)
}

// RoleBindingUpdate validates an update of a RoleBinding; its roleRef is
// fixed (ValidateRoleBindingUpdate), a binding to another role is another
// binding.
func RoleBindingUpdate(newB, oldB *rbacv1.RoleBinding) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newB.ObjectMeta, &oldB.ObjectMeta)
	allErrs = append(allErrs, validateBinding(newB.RoleRef, newB.Subjects, true)...)
	return append(allErrs, validateRoleRefUpdate(newB.RoleRef, oldB.RoleRef)...)
}

// ClusterRoleBinding validates a ClusterRoleBinding.
func ClusterRoleBinding(b *rbacv1.ClusterRoleBinding) field.ErrorList {
	allErrs := validateObjectMetaCreate(&b.ObjectMeta, false, rbacName)
	return append(allErrs, validateBinding(b.RoleRef, b.Subjects, false)...)
}

// ClusterRoleBindingUpdate validates an update of a ClusterRoleBinding.
func ClusterRoleBindingUpdate(newB, oldB *rbacv1.ClusterRoleBinding) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newB.ObjectMeta, &oldB.ObjectMeta)
	allErrs = append(allErrs, validateBinding(newB.RoleRef, newB.Subjects, false)...)
	return append(allErrs, validateRoleRefUpdate(newB.RoleRef, oldB.RoleRef)...)
}

func validateRoleRefUpdate(newRef, oldRef rbacv1.RoleRef) field.ErrorList {
	if newRef != oldRef {
		return field.ErrorList{field.Invalid(field.NewPath("roleRef"), newRef, "cannot change roleRef")}
	}
	return nil
}

// validateBinding follows ValidateRoleBinding and ValidateClusterRoleBinding:
// a cluster binding can only refer to a ClusterRole, and its ServiceAccount
// subjects must say their namespace.
func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var allErrs field.ErrorList
	refPath := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		allErrs = append(allErrs, field.NotSupported(refPath.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if !containsValue(kinds, ref.Kind) {
		allErrs = append(allErrs, field.NotSupported(refPath.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		allErrs = append(allErrs, field.Required(refPath.Child("name"), ""))
	} else {
		for _, msg := range rbacName(ref.Name, false) {
			allErrs = append(allErrs, field.Invalid(refPath.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		allErrs = append(allErrs, validateSubject(s, namespaced, field.NewPath("subjects").Index(i))...)
	}
	return allErrs
}

func validateSubject(s rbacv1.Subject, namespaced bool, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if s.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Name != "" {
			allErrs = append(allErrs, validateDNS1123Subdomain(s.Name, fldPath.Child("name"))...)
		}
		if s.APIGroup != "" {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		if !namespaced && s.Namespace == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.APIGroup != rbacv1.GroupName {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return allErrs
}
