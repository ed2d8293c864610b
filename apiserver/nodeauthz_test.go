package apiserver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodenet/nodenet/apiserver"
)

// startServerWithNodes runs a server whose token file holds the admin and
// two node identities, as `nodenet up` writes it, and returns a client per
// node.
func startServerWithNodes(t *testing.T, nodes ...string) (*testServer, map[string]kubernetes.Interface) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tokens.csv")
	data := "admin-token-0123456789,admin,admin,\"system:masters\"\n"
	for _, n := range nodes {
		data += fmt.Sprintf("%s-token-0123456789,system:node:%s,%s,\"system:nodes\"\n", n, n, n)
	}
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, func(c *apiserver.Config) { c.TokenAuthFile = file })
	clients := map[string]kubernetes.Interface{}
	for _, n := range nodes {
		cfg := rest.CopyConfig(ts.config)
		cfg.BearerToken, cfg.BearerTokenFile = n+"-token-0123456789", ""
		clients[n] = kubernetes.NewForConfigOrDie(cfg)
	}
	return ts, clients
}

// TestNodeAuthorizer: a node's credentials write only its own Node, Lease
// and pods, read only the configmaps its pods use, get tokens
// only for its pods' service accounts, and cannot touch Services or
// another node — the guarantees of kube-apiserver's Node authorizer and
// NodeRestriction admission. Every refusal is a 403 that writes nothing.
func TestNodeAuthorizer(t *testing.T) {
	ts, nodes := startServerWithNodes(t, "node-a", "node-b")
	ctx := ctxT(t)
	admin, a := ts.client, nodes["node-a"]

	// What each node does at start: register, keep a Lease.
	for name, c := range nodes {
		if _, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s registers itself: %v", name, err)
		}
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease}}
		if _, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s creates its Lease: %v", name, err)
		}
	}
	mustCreate := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("admin creates %s: %v", what, err)
		}
	}
	_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "used-by-a"}}, metav1.CreateOptions{})
	mustCreate("a configmap", err)
	_, err = admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "used-by-b"}}, metav1.CreateOptions{})
	mustCreate("a configmap", err)
	_, err = admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner"}}, metav1.CreateOptions{})
	mustCreate("a service account", err)
	pod := func(name, node, configMap, sa string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			NodeName: node, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "c", Image: "x", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}}}},
		}}
	}
	_, err = admin.CoreV1().Pods("default").Create(ctx, pod("on-a", "node-a", "used-by-a", "runner"), metav1.CreateOptions{})
	mustCreate("a pod on node-a", err)
	_, err = admin.CoreV1().Pods("default").Create(ctx, pod("on-b", "node-b", "used-by-b", "default"), metav1.CreateOptions{})
	mustCreate("a pod on node-b", err)
	_, err = admin.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	mustCreate("a Service", err)

	allowed := map[string]func() error{
		"patch its own Node": func() error {
			_, err := a.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		},
		"update its own Node's status": func() error {
			n, err := a.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			if err == nil {
				n.Status.Phase = corev1.NodeRunning
				_, err = a.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			}
			return err
		},
		"renew its own Lease": func() error {
			_, err := a.CoordinationV1().Leases(corev1.NamespaceNodeLease).Patch(ctx, "node-a", types.MergePatchType, []byte(`{"spec":{"holderIdentity":"node-a"}}`), metav1.PatchOptions{})
			return err
		},
		"list every pod and Service": func() error {
			if _, err := a.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err != nil {
				return err
			}
			_, err := a.CoreV1().Services("").List(ctx, metav1.ListOptions{})
			return err
		},
		"update the status of a pod bound to it": func() error {
			_, err := a.CoreV1().Pods("default").Patch(ctx, "on-a", types.MergePatchType, []byte(`{"status":{"message":"running"}}`), metav1.PatchOptions{}, "status")
			return err
		},
		"read a configmap its pod uses": func() error {
			_, err := a.CoreV1().ConfigMaps("default").Get(ctx, "used-by-a", metav1.GetOptions{})
			return err
		},
		"get a token for its pod's service account": func() error {
			_, err := a.CoreV1().ServiceAccounts("default").CreateToken(ctx, "runner", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		},
		"record an event": func() error {
			_, err := a.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "on-a", Namespace: "default"}, Reason: "Started", Type: corev1.EventTypeNormal}, metav1.CreateOptions{})
			return err
		},
	}
	for what, do := range allowed {
		if err := do(); err != nil {
			t.Errorf("node-a may %s: %v", what, err)
		}
	}

	refused := map[string]func() error{
		"patch another Node": func() error {
			_, err := a.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		},
		"update another Node's status": func() error {
			_, err := a.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"status":{"phase":"Terminated"}}`), metav1.PatchOptions{}, "status")
			return err
		},
		"delete another Node": func() error { return a.CoreV1().Nodes().Delete(ctx, "node-b", metav1.DeleteOptions{}) },
		"register a Node under another name": func() error {
			_, err := a.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}, metav1.CreateOptions{})
			return err
		},
		"create a Lease for another node": func() error {
			_, err := a.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}, metav1.CreateOptions{})
			return err
		},
		"renew another node's Lease": func() error {
			_, err := a.CoordinationV1().Leases(corev1.NamespaceNodeLease).Patch(ctx, "node-b", types.MergePatchType, []byte(`{"spec":{"holderIdentity":"node-a"}}`), metav1.PatchOptions{})
			return err
		},
		"modify a Service": func() error {
			_, err := a.CoreV1().Services("default").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"externalIPs":["203.0.113.9"]}}`), metav1.PatchOptions{})
			return err
		},
		"create a Service": func() error {
			_, err := a.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "evil"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
			return err
		},
		"delete a Service": func() error { return a.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}) },
		"write an EndpointSlice": func() error {
			return a.DiscoveryV1().EndpointSlices("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		},
		"create a pod": func() error {
			_, err := a.CoreV1().Pods("default").Create(ctx, pod("sneaky", "node-a", "used-by-b", "default"), metav1.CreateOptions{})
			return err
		},
		"update the status of another node's pod": func() error {
			_, err := a.CoreV1().Pods("default").Patch(ctx, "on-b", types.MergePatchType, []byte(`{"status":{"message":"hijacked"}}`), metav1.PatchOptions{}, "status")
			return err
		},
		"delete another node's pod": func() error { return a.CoreV1().Pods("default").Delete(ctx, "on-b", metav1.DeleteOptions{}) },
		"read a configmap only another node's pod uses": func() error {
			_, err := a.CoreV1().ConfigMaps("default").Get(ctx, "used-by-b", metav1.GetOptions{})
			return err
		},
		"list configmaps": func() error {
			_, err := a.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			return err
		},
		"get a token for a service account none of its pods runs as": func() error {
			_, err := a.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		},
		"grant itself a role": func() error {
			_, err := a.RbacV1().ClusterRoleBindings().Create(ctx, clusterAdminBinding("node-a"), metav1.CreateOptions{})
			return err
		},
	}
	for what, do := range refused {
		rev := etcdRevision(t, ts)
		err := do()
		if !apierrors.IsForbidden(err) {
			t.Errorf("node-a may not %s: got %v, want 403", what, err)
			continue
		}
		if !strings.Contains(err.Error(), "node") {
			t.Errorf("%s: the refusal does not say why: %v", what, err)
		}
		if got := etcdRevision(t, ts); got != rev {
			t.Errorf("%s: a refused request wrote to etcd", what)
		}
	}

	// kubectl auth can-i asks the same authorizer.
	review, err := a.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "update", Resource: "nodes", Name: "node-b"}}}, metav1.CreateOptions{})
	if err != nil || review.Status.Allowed {
		t.Errorf("can node-a update node-b? %+v, %v; want no", review, err)
	}
}

func clusterAdminBinding(node string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: node + "-admin"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "system:node:" + node}}}
}
