package node

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/daemonset/manifest"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

// The proof the local cluster can run its node daemons as the DaemonSet:
// the pod template of daemonset/manifest, unchanged, run on a node by the
// agent — install-cni puts nodenet-cni into the node's /opt/cni/bin,
// flanneld (in-cluster config from the service account token the agent
// mounts, held to the manifest's ClusterRole) writes the
// conflist into the node's /etc/cni/net.d, and flanneld's and the
// proxy's health endpoints answer.
func TestDaemonSetPodRunsOnTheAgent(t *testing.T) {
	n := startNode(t)
	ctx := testapi.Context(t)
	// flanneld finds its interface from the default route.
	nettest.Link(t, n.ns, "eth0", "172.30.99.11/24", nettest.New(t), "eth0", "172.30.99.1/24")
	n.ns.MustExec(t, "ip", "route", "add", "default", "via", "172.30.99.1")
	patch := []byte(`{"spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24"]}}`)
	if _, err := n.client.CoreV1().Nodes().Patch(ctx, n.name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	o := manifest.Defaults()
	var ds *appsv1.DaemonSet
	for _, obj := range manifest.Objects(o) {
		var err error
		switch v := obj.(type) {
		case *corev1.Namespace:
			_, err = n.client.CoreV1().Namespaces().Create(ctx, v, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = n.client.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = n.client.RbacV1().ClusterRoles().Create(ctx, v, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = n.client.RbacV1().ClusterRoleBindings().Create(ctx, v, metav1.CreateOptions{})
		case *corev1.ConfigMap:
			_, err = n.client.CoreV1().ConfigMaps(v.Namespace).Create(ctx, v, metav1.CreateOptions{})
		case *appsv1.DaemonSet:
			ds = v
		default:
			t.Fatalf("manifest object %T not handled by the test", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
	// The pod as the DaemonSet controller makes it; its service account
	// token comes from the agent (TokenRequest), and flanneld and the
	// proxy are held to the manifest's ClusterRole by the API server's
	// RBAC for service accounts.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nodenet-" + n.name, Namespace: o.Namespace, Labels: ds.Spec.Template.Labels},
		Spec: *ds.Spec.Template.Spec.DeepCopy()}
	pod.Spec.NodeName = n.name
	if _, err := n.client.CoreV1().Pods(o.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := n.client.CoreV1().Pods(o.Namespace)
	// Registered first, so it runs after the dump below.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		_ = pods.Delete(cctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](5)})
		for cctx.Err() == nil {
			if _, err := pods.Get(cctx, pod.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Errorf("DaemonSet pod not torn down")
	})
	n.dumpOnFailure(t, o.Namespace, pod.Name)
	testapi.Eventually(t, 90*time.Second, "the DaemonSet's pod Ready", func() bool {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
	for _, f := range []string{"opt/cni/bin/nodenet", "opt/cni/bin/flannel", "etc/cni/net.d/10-nodenet.conflist", "run/flannel/subnet.env"} {
		if _, err := os.Stat(filepath.Join(n.hostRoot, f)); err != nil {
			t.Errorf("node root lacks %s: %v", f, err)
		}
	}
	for _, url := range []string{
		fmt.Sprintf("http://127.0.0.1:%d/healthz", manifest.FlanneldHealthPort),
		fmt.Sprintf("http://127.0.0.1:%d/livez", manifest.ProxyHealthPort),
		fmt.Sprintf("http://127.0.0.1:%d/healthz", manifest.ProxyHealthPort),
	} {
		// Dialled from inside the node's namespace.
		cl := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: dialIn(n.ns)}}
		code := 0
		resp, err := cl.Get(url)
		if err == nil {
			resp.Body.Close()
			code = resp.StatusCode
		}
		if err != nil || code != http.StatusOK {
			t.Errorf("GET %s in the node: %d, %v", url, code, err)
		}
	}
}
