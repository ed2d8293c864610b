package node

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

// TestServiceAccountTokenMountAndRefresh: against the real API server
// (no kernel needed), the agent mounts a pod-bound token the server
// accepts as the pod's service account, renews it when due without a
// reader ever seeing a partial file, and mounts nothing for a pod whose
// account does not exist.
func TestServiceAccountTokenMountAndRefresh(t *testing.T) {
	srv := testapi.Start(t)
	ctx := testapi.Context(t)
	c := srv.Client
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{ServiceAccountName: "app", Containers: []corev1.Container{{Name: "c", Image: "host"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Client: c, NodeName: "n", NodeIP: "127.0.0.1", StateDir: t.TempDir(), APIServerCA: []byte("CA PEM"), Logger: testapi.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	w := newPodWorker(a, pod.UID)
	m, err := w.serviceAccountMount(ctx, pod, pod.Spec.Containers[0])
	if err != nil || m == nil {
		t.Fatalf("mount %+v, %v", m, err)
	}
	if m.Target != saMountPath || !m.ReadOnly {
		t.Errorf("mount %+v", m)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(m.Source, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if read("namespace") != "default" || read("ca.crt") != "CA PEM" {
		t.Errorf("namespace %q, ca.crt %q", read("namespace"), read("ca.crt"))
	}
	first := read("token")
	whoami := func(token string) authenticationv1.UserInfo {
		t.Helper()
		cfg := rest.AnonymousClientConfig(srv.Config)
		cfg.BearerToken = token
		ssr, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectReview with the mounted token: %v", err)
		}
		return ssr.Status.UserInfo
	}
	u := whoami(first)
	if u.Username != "system:serviceaccount:default:app" || strings.Join(u.Extra["authentication.kubernetes.io/pod-uid"], "") != string(pod.UID) {
		t.Errorf("the mounted token is %+v", u)
	}
	// Renewal is due at 80% of the hour asked for.
	if due := time.Until(w.tokenRefreshAt); due < 47*time.Minute || due > 48*time.Minute {
		t.Errorf("renewal due in %v, want 48 min", due)
	}
	// A second container of the pod shares the token: no new request.
	if m2, err := w.serviceAccountMount(ctx, pod, corev1.Container{Name: "d"}); err != nil || m2 == nil || read("token") != first {
		t.Errorf("second container: %+v, %v, token changed: %v", m2, err, read("token") != first)
	}
	w.refreshServiceAccountToken(ctx, pod)
	if read("token") != first {
		t.Fatal("renewed before due")
	}

	// Renew a few times while a reader keeps reading: every read is a
	// whole token.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Value
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			b, err := os.ReadFile(filepath.Join(m.Source, "token"))
			if err != nil || strings.Count(string(b), ".") != 2 || len(b) < 100 {
				bad.Store(string(b) + " " + strings.TrimSpace(errString(err)))
				return
			}
		}
	}()
	last := first
	for range 5 {
		w.tokenRefreshAt = time.Now().Add(-time.Second)
		w.refreshServiceAccountToken(ctx, pod)
		if tok := read("token"); tok == last {
			t.Fatal("a due token was not renewed")
		} else {
			last = tok
		}
	}
	stop.Store(true)
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Errorf("a reader saw a partial token: %q", b)
	}
	if u := whoami(last); u.Username != "system:serviceaccount:default:app" {
		t.Errorf("the renewed token is %+v", u)
	}
	entries, _ := os.ReadDir(m.Source)
	if len(entries) != 3 {
		t.Errorf("volume holds %d files (temp files left?): %v", len(entries), entries)
	}

	// An adopting worker (agent restart) renews at once.
	w2 := newPodWorker(a, pod.UID)
	w2.refreshServiceAccountToken(ctx, pod)
	if read("token") == last || w2.tokenRefreshAt.IsZero() {
		t.Error("an adopted pod's token was not renewed")
	}

	// No such account, or an opt-out: nothing mounted.
	orphan := pod.DeepCopy()
	orphan.Spec.ServiceAccountName, orphan.UID = "nobody", "other-uid"
	if m, err := newPodWorker(a, orphan.UID).serviceAccountMount(ctx, orphan, orphan.Spec.Containers[0]); m != nil || err != nil {
		t.Errorf("pod of a missing account: %+v, %v", m, err)
	}
	optOut := pod.DeepCopy()
	optOut.Spec.AutomountServiceAccountToken = ptr.To(false)
	if m, err := newPodWorker(a, optOut.UID).serviceAccountMount(ctx, optOut, optOut.Spec.Containers[0]); m != nil || err != nil {
		t.Errorf("opted-out pod: %+v, %v", m, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestPodCallsTheAPIAsItsServiceAccount: a container of a pod run by the
// real agent reads the mounted token and CA and calls the API server as
// its service account, which gets what its RBAC binding grants.
func TestPodCallsTheAPIAsItsServiceAccount(t *testing.T) {
	nettest.RequireTool(t, "curl")
	n := startNode(t)
	ctx := testapi.Context(t)
	if _, err := n.client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "checker"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "list-nodes"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "checker-list-nodes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "list-nodes"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "checker"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	script := `d=` + saMountPath + `
api=https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
call() { curl -sS --cacert $d/ca.crt -H "Authorization: Bearer $(cat $d/token)" "$@"; }
echo "ns=$(cat $d/namespace)"
call -X POST -H 'Content-Type: application/json' -d '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' $api/apis/authentication.k8s.io/v1/selfsubjectreviews
echo
call -o /dev/null -w 'nodes=%{http_code}\n' $api/api/v1/nodes
call -o /dev/null -w 'pods=%{http_code}\n' $api/api/v1/namespaces/default/pods
exec sleep 3600`
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "checker", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: n.name, HostNetwork: true, ServiceAccountName: "checker",
		Containers: []corev1.Container{{Name: "main", Image: "host", Command: sh(script)}}}}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.dumpOnFailure(t, "default", "checker")
	var out string
	testapi.Eventually(t, 60*time.Second, "the checker's output", func() bool {
		b, err := n.client.CoreV1().Pods("default").GetLogs("checker", &corev1.PodLogOptions{}).DoRaw(ctx)
		out = string(b)
		return err == nil && strings.Contains(out, "pods=")
	})
	for _, want := range []string{"ns=default", `"username":"system:serviceaccount:default:checker"`, "nodes=200", "pods=403"} {
		if !strings.Contains(out, want) {
			t.Errorf("the pod's output lacks %q:\n%s", want, out)
		}
	}
}
