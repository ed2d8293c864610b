package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Node identities, as kube-apiserver names kubelets: user
// "system:node:<node name>" in group "system:nodes".
const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// nodeOf returns the node a caller speaks for, if it is a node identity.
func nodeOf(u user) (string, bool) {
	if !slices.Contains(u.Groups, nodesGroup) {
		return "", false
	}
	name, ok := strings.CutPrefix(u.Name, nodeUserPrefix)
	return name, ok && name != ""
}

// nodeAuthorizer holds node identities to their own node, as
// kube-apiserver's Node authorizer and NodeRestriction admission do
// together: a node agent reads what any node needs (nodes, pods, services,
// endpoints), writes only its own Node and Lease and the pods bound to it,
// reads only the Secrets and ConfigMaps its own pods use, and asks for
// service account tokens only for accounts its pods run as. A stolen node
// credential therefore cannot touch another node, a Service or another
// node's pods. Everyone else is left to others.
//
// Decisions about a named pod, secret or account look at the pods bound to
// the node in the watch cache. A pod found there decides at once; only a
// refusal waits (briefly) for the cache to hold this server's last pod
// write and looks again, so a pod scheduled a moment ago already counts.
// Waiting on every request instead made each node write wait for the
// cache to catch up with the busiest resource, which under pod churn (ten
// pods a second) held node requests for up to 2 s and, through the
// connections they share, everyone else's. The cache may be stale the
// other way (a pod deleted and created again on another node a moment
// ago): writes to a pod are therefore checked again against the stored
// pod (nodeMayWritePod), as NodeRestriction admission does.
type nodeAuthorizer struct {
	s      *Server
	others authorizer
}

const nodeReasonPrefix = "node authorizer: "

// nodeReadable are the resources every node may get, list and watch.
var nodeReadable = map[schema.GroupResource]bool{
	{Resource: "nodes"}:      true,
	{Resource: "pods"}:       true,
	{Resource: "services"}:   true,
	{Resource: "endpoints"}:  true,
	{Resource: "namespaces"}: true,
	{Group: "discovery.k8s.io", Resource: "endpointslices"}: true,
}

func (a nodeAuthorizer) authorize(u user, at authzAttributes) authzDecision {
	node, ok := nodeOf(u)
	if !ok {
		return a.others.authorize(u, at)
	}
	if !at.resourceRequest {
		return authzDecision{allowed: true, reason: nodeReasonPrefix + "non-resource requests are allowed"}
	}
	allowed, why := a.decide(node, at)
	return authzDecision{allowed: allowed, reason: nodeReasonPrefix + why}
}

func isRead(verb string) bool { return verb == "get" || verb == "list" || verb == "watch" }

func (a nodeAuthorizer) decide(node string, at authzAttributes) (bool, string) {
	gr := schema.GroupResource{Group: at.group, Resource: at.resource}
	switch {
	case gr == schema.GroupResource{Resource: "nodes"}:
		if isRead(at.verb) {
			return true, "nodes are readable by every node"
		}
		// A create names its object in the body: admitNode checks it.
		if at.name == node || (at.verb == "create" && at.name == "") {
			return true, "a node may write its own Node"
		}
		return false, fmt.Sprintf("node %q may write only its own Node object", node)
	case gr == schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}:
		if at.namespace == corev1.NamespaceNodeLease && (at.name == node || (at.verb == "create" && at.name == "")) {
			return true, "a node may keep its own Lease"
		}
		return false, fmt.Sprintf("node %q may use only its own Lease in %s", node, corev1.NamespaceNodeLease)
	case gr == schema.GroupResource{Resource: "events"} || gr == schema.GroupResource{Group: "events.k8s.io", Resource: "events"}:
		if at.verb == "create" || at.verb == "patch" || at.verb == "update" {
			return true, "nodes record events"
		}
	case gr == schema.GroupResource{Resource: "pods"} && !isRead(at.verb):
		if at.verb == "create" || at.name == "" {
			return false, fmt.Sprintf("node %q may not %s pods", node, at.verb)
		}
		if at.subresource != "" && at.subresource != "status" {
			break
		}
		if a.podOnNode(node, at.namespace, at.name, nil) {
			return true, "the pod is bound to this node"
		}
		return false, fmt.Sprintf("pod %s/%s is not bound to node %q", at.namespace, at.name, node)
	case nodeReadable[gr] && isRead(at.verb):
		return true, at.resource + " are readable by every node"
	case (gr == schema.GroupResource{Resource: "secrets"} || gr == schema.GroupResource{Resource: "configmaps"}) && at.verb == "get":
		kind := strings.TrimSuffix(at.resource, "s")
		if a.podOnNode(node, at.namespace, "", func(p *corev1.Pod) bool { return podUses(p, kind, at.name) }) {
			return true, "a pod bound to this node uses it"
		}
		return false, fmt.Sprintf("no pod bound to node %q uses %s %s/%s", node, kind, at.namespace, at.name)
	case gr == schema.GroupResource{Resource: "serviceaccounts"} && at.subresource == "token" && at.verb == "create":
		if a.podOnNode(node, at.namespace, "", func(p *corev1.Pod) bool { return podServiceAccount(p) == at.name }) {
			return true, "a pod bound to this node runs as the service account"
		}
		return false, fmt.Sprintf("no pod bound to node %q runs as service account %s/%s", node, at.namespace, at.name)
	}
	what := at.resource
	if at.subresource != "" {
		what += "/" + at.subresource
	}
	return false, fmt.Sprintf("nodes may not %s %s", at.verb, what)
}

// podOnNode reports whether a pod bound to node exists in namespace with
// the given name (any name if empty) for which match (if set) holds.
func (a nodeAuthorizer) podOnNode(node, namespace, name string, match func(*corev1.Pod) bool) bool {
	res := a.s.byGV[coreV1]["pods"]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if a.cachedPodOnNode(node, namespace, name, match) {
		return true
	}
	if err := res.cache.WaitRevision(ctx, res.store.LastWrite()); err != nil {
		a.s.log.Warn("node authorizer: pod cache behind the last write", "err", err)
	}
	return a.cachedPodOnNode(node, namespace, name, match)
}

// cachedPodOnNode is podOnNode on the watch cache as it is now. The cache
// is synced before the server serves and a list at revision 0 never
// waits, so no deadline applies (an expired one could fail it).
func (a nodeAuthorizer) cachedPodOnNode(node, namespace, name string, match func(*corev1.Pod) bool) bool {
	res := a.s.byGV[coreV1]["pods"]
	if name != "" {
		p, ok := res.cache.Get(res.store.Key(namespace, name)).(*corev1.Pod)
		return ok && p.Spec.NodeName == node && (match == nil || match(p))
	}
	objs, _, err := res.cache.List(context.Background(), res.store.NamespacePrefix(namespace), 0, func(o runtime.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.Spec.NodeName == node && (match == nil || match(p))
	})
	if err != nil {
		a.s.log.Warn("node authorizer: list pods from the watch cache", "err", err)
		return false
	}
	return len(objs) > 0
}

func podServiceAccount(p *corev1.Pod) string {
	if p.Spec.ServiceAccountName != "" {
		return p.Spec.ServiceAccountName
	}
	return "default"
}

// podUses reports whether p refers to the secret or configmap name: in a
// volume (projected ones included), an env or envFrom source of any
// container, or an image pull secret.
func podUses(p *corev1.Pod, kind, name string) bool {
	if kind == "secret" && slices.ContainsFunc(p.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == name }) {
		return true
	}
	for _, v := range p.Spec.Volumes {
		switch {
		case kind == "secret" && v.Secret != nil && v.Secret.SecretName == name,
			kind == "configmap" && v.ConfigMap != nil && v.ConfigMap.Name == name:
			return true
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if (kind == "secret" && src.Secret != nil && src.Secret.Name == name) || (kind == "configmap" && src.ConfigMap != nil && src.ConfigMap.Name == name) {
					return true
				}
			}
		}
	}
	containers := slices.Concat(p.Spec.InitContainers, p.Spec.Containers)
	for _, c := range containers {
		for _, from := range c.EnvFrom {
			if (kind == "secret" && from.SecretRef != nil && from.SecretRef.Name == name) || (kind == "configmap" && from.ConfigMapRef != nil && from.ConfigMapRef.Name == name) {
				return true
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if (kind == "secret" && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == name) || (kind == "configmap" && e.ValueFrom.ConfigMapKeyRef != nil && e.ValueFrom.ConfigMapKeyRef.Name == name) {
				return true
			}
		}
	}
	return false
}

// rules summarises what a node may do (SelfSubjectRulesReview); the
// per-object conditions cannot be expressed as rules, so the review is
// marked incomplete, as upstream marks the Node authorizer's.
func (a nodeAuthorizer) rules(u user, namespace string) authorizationv1.SubjectRulesReviewStatus {
	node, ok := nodeOf(u)
	if !ok {
		return a.others.rules(u, namespace)
	}
	read := []string{"get", "list", "watch"}
	return authorizationv1.SubjectRulesReviewStatus{
		ResourceRules: []authorizationv1.ResourceRule{
			{Verbs: read, APIGroups: []string{""}, Resources: []string{"nodes", "pods", "services", "endpoints", "namespaces"}},
			{Verbs: read, APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}},
			{Verbs: []string{"create", "update", "patch", "delete"}, APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, ResourceNames: []string{node}},
			{Verbs: []string{"get", "create", "update", "patch", "delete"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{node}},
			{Verbs: []string{"create", "update", "patch"}, APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}},
		},
		NonResourceRules: []authorizationv1.NonResourceRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
		Incomplete:       true,
		EvaluationError:  "node authorizer: writes to pods, reads of secrets and configmaps and token requests depend on the pods bound to the node",
	}
}

// nodeMayWritePod is the NodeRestriction check of a write to a stored pod
// (cur, read from etcd for this write): a node writes only pods bound to
// it. The authorizer decided on the watch cache, which may lag; this
// decides on the object the write replaces.
func nodeMayWritePod(ctx context.Context, req *apiRequest, cur runtime.Object) error {
	u, _ := ctx.Value(userKey{}).(user)
	node, ok := nodeOf(u)
	if !ok || req.res.gv != coreV1 || req.res.plural != "pods" {
		return nil
	}
	if p, ok := cur.(*corev1.Pod); ok && p.Spec.NodeName != node {
		return apierrors.NewForbidden(req.gr(), req.name, fmt.Errorf("pod %s/%s is not bound to node %q", p.Namespace, p.Name, node))
	}
	return nil
}

// admitNode is the NodeRestriction half for creates, whose object name is
// only known from the body: a node may create only its own Node, and only
// its own Lease.
func admitNode(u user, req *apiRequest, obj runtime.Object) error {
	node, ok := nodeOf(u)
	if !ok {
		return nil
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	gr := schema.GroupResource{Group: req.res.gv.Group, Resource: req.res.plural}
	switch gr {
	case schema.GroupResource{Resource: "nodes"}, schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}:
		if acc.GetName() != node {
			return apierrors.NewForbidden(gr, acc.GetName(), fmt.Errorf("node %q may create only its own %s", node, req.res.kind))
		}
	}
	return nil
}
