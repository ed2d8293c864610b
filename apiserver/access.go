package apiserver

// ServiceAccounts and rbac.authorization.k8s.io/v1 Roles, ClusterRoles and
// their bindings are stored and served as plain objects, so that manifests
// that ship them (daemonset/nodenet.yaml does) apply unchanged with
// kubectl. They bind service accounts only: a service account token
// (serviceaccounts/<name>/token, tokens.go) gets what its bindings grant
// (rbac.go), while the token file's users may do everything (authz.go),
// unless an embedder's Config.Authorizer decides for all.

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodenet/nodenet/apiserver/defaulting"
	"github.com/nodenet/nodenet/apiserver/validation"
)

var rbacV1 = rbacv1.SchemeGroupVersion

func accessResources() []*resource {
	return []*resource{
		{
			gv: coreV1, plural: "serviceaccounts", singular: "serviceaccount", kind: "ServiceAccount", shortNames: []string{"sa"},
			namespaced: true,
			newObj:     func() runtime.Object { return &corev1.ServiceAccount{} },
			newList:    func() runtime.Object { return &corev1.ServiceAccountList{} },
			validate:   typed(validation.ServiceAccount), validateUpd: typed2(validation.ServiceAccountUpdate),
		},
		{
			gv: rbacV1, plural: "clusterroles", singular: "clusterrole", kind: "ClusterRole",
			newObj:   func() runtime.Object { return &rbacv1.ClusterRole{} },
			newList:  func() runtime.Object { return &rbacv1.ClusterRoleList{} },
			validate: typed(validation.ClusterRole), validateUpd: typed2(validation.ClusterRoleUpdate),
		},
		{
			gv: rbacV1, plural: "clusterrolebindings", singular: "clusterrolebinding", kind: "ClusterRoleBinding",
			newObj:   func() runtime.Object { return &rbacv1.ClusterRoleBinding{} },
			newList:  func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
			defaults: typedDefault(defaulting.ClusterRoleBinding),
			validate: typed(validation.ClusterRoleBinding), validateUpd: typed2(validation.ClusterRoleBindingUpdate),
			columns: func() []column { return bindingColumns(clusterRoleBindingParts) },
		},
		{
			gv: rbacV1, plural: "roles", singular: "role", kind: "Role",
			namespaced: true,
			newObj:     func() runtime.Object { return &rbacv1.Role{} },
			newList:    func() runtime.Object { return &rbacv1.RoleList{} },
			validate:   typed(validation.Role), validateUpd: typed2(validation.RoleUpdate),
		},
		{
			gv: rbacV1, plural: "rolebindings", singular: "rolebinding", kind: "RoleBinding",
			namespaced: true,
			newObj:     func() runtime.Object { return &rbacv1.RoleBinding{} },
			newList:    func() runtime.Object { return &rbacv1.RoleBindingList{} },
			defaults:   typedDefault(defaulting.RoleBinding),
			validate:   typed(validation.RoleBinding), validateUpd: typed2(validation.RoleBindingUpdate),
			columns: func() []column { return bindingColumns(roleBindingParts) },
		},
	}
}

func clusterRoleBindingParts(o runtime.Object) (rbacv1.RoleRef, []rbacv1.Subject) {
	b := o.(*rbacv1.ClusterRoleBinding)
	return b.RoleRef, b.Subjects
}

func roleBindingParts(o runtime.Object) (rbacv1.RoleRef, []rbacv1.Subject) {
	b := o.(*rbacv1.RoleBinding)
	return b.RoleRef, b.Subjects
}

// bindingColumns are kube-apiserver's binding columns: ROLE as Kind/name,
// and with -o wide the bound users, groups and service accounts.
func bindingColumns(parts func(runtime.Object) (rbacv1.RoleRef, []rbacv1.Subject)) []column {
	subjects := func(kind string) func(runtime.Object) any {
		return func(o runtime.Object) any {
			_, subs := parts(o)
			var names []string
			for _, s := range subs {
				if s.Kind != kind {
					continue
				}
				if kind == rbacv1.ServiceAccountKind {
					names = append(names, s.Namespace+"/"+s.Name)
				} else {
					names = append(names, s.Name)
				}
			}
			return strings.Join(names, ", ")
		}
	}
	return []column{nameCol(),
		{name: "Role", typ: "string", cell: func(o runtime.Object) any {
			ref, _ := parts(o)
			return ref.Kind + "/" + ref.Name
		}},
		ageCol(),
		{name: "Users", typ: "string", wide: true, cell: subjects(rbacv1.UserKind)},
		{name: "Groups", typ: "string", wide: true, cell: subjects(rbacv1.GroupKind)},
		{name: "ServiceAccounts", typ: "string", wide: true, cell: subjects(rbacv1.ServiceAccountKind)},
	}
}
