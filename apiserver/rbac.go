package apiserver

import (
	"context"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// serviceAccountRBAC holds service accounts to the RBAC objects stored in
// this server, as kube-apiserver's RBAC authorizer would, and leaves
// everyone else to others (allowAll). The token file's users are the
// operator and the cluster's own components; a service account token is
// what a workload carries, and the ClusterRole its manifest ships is
// then what it may really do, as on a real cluster.
//
// Roles, ClusterRoles and their bindings are read from the watch caches
// on every decision, so a new binding applies as soon as it is stored.
// Not evaluated: aggregated ClusterRoles (aggregationRule; kube's
// controller-manager fills their rules, nothing here does) and
// non-resource URLs, which this server does not authorize for anyone
// (discovery, health, version, metrics; authorizeResource is the only
// gate).
type serviceAccountRBAC struct {
	s      *Server
	others authorizer
}

const serviceAccountPrefix = "system:serviceaccount:"

const rbacNonResourceReason = "nodenet API server: non-resource requests are allowed to every authenticated user"

func (a serviceAccountRBAC) authorize(u user, at authzAttributes) authzDecision {
	if !strings.HasPrefix(u.Name, serviceAccountPrefix) {
		return a.others.authorize(u, at)
	}
	if !at.resourceRequest {
		return authzDecision{allowed: true, reason: rbacNonResourceReason}
	}
	by := ""
	a.visitRules(u, at.namespace, func(binding string, r rbacv1.PolicyRule) bool {
		if ruleAllows(r, at) {
			by = binding
			return false
		}
		return true
	})
	if by != "" {
		return authzDecision{allowed: true, reason: "RBAC: allowed by " + by}
	}
	return authzDecision{reason: "no RBAC policy matched"}
}

func (a serviceAccountRBAC) rules(u user, namespace string) authorizationv1.SubjectRulesReviewStatus {
	if !strings.HasPrefix(u.Name, serviceAccountPrefix) {
		return a.others.rules(u, namespace)
	}
	st := authorizationv1.SubjectRulesReviewStatus{
		ResourceRules:    []authorizationv1.ResourceRule{},
		NonResourceRules: []authorizationv1.NonResourceRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
	}
	a.visitRules(u, namespace, func(_ string, r rbacv1.PolicyRule) bool {
		if len(r.Resources) > 0 {
			st.ResourceRules = append(st.ResourceRules, authorizationv1.ResourceRule{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
		}
		return true
	})
	return st
}

// visitRules calls f with every rule granted to u in namespace ("" for
// cluster-wide rules only) until f returns false.
func (a serviceAccountRBAC) visitRules(u user, namespace string, f func(binding string, r rbacv1.PolicyRule) bool) {
	a.catchUp()
	for _, o := range a.cached("clusterrolebindings", "") {
		b := o.(*rbacv1.ClusterRoleBinding)
		if bindsUser(b.Subjects, u, "") && !visitRole(a.role(b.RoleRef, ""), "ClusterRoleBinding "+b.Name, f) {
			return
		}
	}
	if namespace == "" {
		return
	}
	for _, o := range a.cached("rolebindings", namespace) {
		b := o.(*rbacv1.RoleBinding)
		if bindsUser(b.Subjects, u, namespace) && !visitRole(a.role(b.RoleRef, namespace), "RoleBinding "+namespace+"/"+b.Name, f) {
			return
		}
	}
}

func visitRole(rules []rbacv1.PolicyRule, binding string, f func(string, rbacv1.PolicyRule) bool) bool {
	for _, r := range rules {
		if !f(binding, r) {
			return false
		}
	}
	return true
}

// catchUp waits (briefly) until the RBAC caches hold this server's last
// write to each RBAC resource, so a binding the server has acknowledged is
// in force for the next request. Caught-up caches return at once.
func (a serviceAccountRBAC) catchUp() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, plural := range []string{"clusterrolebindings", "rolebindings", "clusterroles", "roles"} {
		res := a.s.byGV[rbacV1][plural]
		if err := res.cache.WaitRevision(ctx, res.store.LastWrite()); err != nil {
			a.s.log.Warn("RBAC: watch cache behind the last write", "resource", plural, "err", err)
		}
	}
}

// cached lists a resource of rbac.authorization.k8s.io from its watch
// cache. The caches are synced before the server serves, and a list at
// revision 0 never waits, so no context is needed.
func (a serviceAccountRBAC) cached(plural, namespace string) []runtime.Object {
	res := a.s.byGV[rbacV1][plural]
	objs, _, err := res.cache.List(context.Background(), res.store.NamespacePrefix(namespace), 0, nil)
	if err != nil {
		a.s.log.Warn("RBAC: list from the watch cache", "resource", plural, "err", err)
		return nil
	}
	return objs
}

// role is the rules of the role a binding in namespace refers to; a
// missing role grants nothing, as upstream.
func (a serviceAccountRBAC) role(ref rbacv1.RoleRef, namespace string) []rbacv1.PolicyRule {
	switch {
	case ref.Kind == "ClusterRole":
		res := a.s.byGV[rbacV1]["clusterroles"]
		if o, ok := res.cache.Get(res.store.Key("", ref.Name)).(*rbacv1.ClusterRole); ok {
			return o.Rules
		}
	case ref.Kind == "Role" && namespace != "":
		res := a.s.byGV[rbacV1]["roles"]
		if o, ok := res.cache.Get(res.store.Key(namespace, ref.Name)).(*rbacv1.Role); ok {
			return o.Rules
		}
	}
	return nil
}

// bindsUser: one of subjects is u. A ServiceAccount subject of a
// RoleBinding without a namespace means the binding's own.
func bindsUser(subjects []rbacv1.Subject, u user, bindingNS string) bool {
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			if s.Name == u.Name {
				return true
			}
		case rbacv1.GroupKind:
			if slices.Contains(u.Groups, s.Name) {
				return true
			}
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = bindingNS
			}
			if ns != "" && serviceAccountUsername(ns, s.Name) == u.Name {
				return true
			}
		}
	}
	return false
}

// ruleAllows matches one resource request against a rule with upstream's
// semantics: "*" for verbs, groups and resources, "<resource>/<sub>" and
// "*/<sub>" for subresources, and resourceNames only for named requests.
func ruleAllows(r rbacv1.PolicyRule, at authzAttributes) bool {
	if !hasOrStar(r.Verbs, at.verb) || !hasOrStar(r.APIGroups, at.group) {
		return false
	}
	want := at.resource
	if at.subresource != "" {
		want += "/" + at.subresource
	}
	if !hasOrStar(r.Resources, want) && (at.subresource == "" || !slices.Contains(r.Resources, "*/"+at.subresource)) {
		return false
	}
	return len(r.ResourceNames) == 0 || (at.name != "" && slices.Contains(r.ResourceNames, at.name))
}

func hasOrStar(list []string, v string) bool {
	return slices.Contains(list, v) || slices.Contains(list, "*")
}
