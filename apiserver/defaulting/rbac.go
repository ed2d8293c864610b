package defaulting

import rbacv1 "k8s.io/api/rbac/v1"

// RoleBinding sets the rbac/v1 defaults of a RoleBinding: the roleRef's and
// the subjects' API groups.
func RoleBinding(b *rbacv1.RoleBinding) { binding(&b.RoleRef, b.Subjects) }

// ClusterRoleBinding sets the rbac/v1 defaults of a ClusterRoleBinding.
func ClusterRoleBinding(b *rbacv1.ClusterRoleBinding) { binding(&b.RoleRef, b.Subjects) }

// binding is SetDefaults_RoleBinding and SetDefaults_Subject: roles live in
// the RBAC group, users and groups are RBAC subjects, service accounts are
// core objects.
func binding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	setDefault(&ref.APIGroup, rbacv1.GroupName)
	for i := range subjects {
		s := &subjects[i]
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}
