package apiserver_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodenet/nodenet/apiserver/satoken"
	"github.com/nodenet/nodenet/internal/testapi"
)

// asToken is a client that presents token and nothing else.
func (ts *testServer) asToken(token string) kubernetes.Interface {
	cfg := rest.AnonymousClientConfig(ts.config)
	cfg.BearerToken = token
	return kubernetes.NewForConfigOrDie(cfg)
}

// whoami is the SelfSubjectReview of a token's client, or its error.
func whoami(t *testing.T, c kubernetes.Interface) (authenticationv1.UserInfo, error) {
	t.Helper()
	ssr, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctxT(t), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return ssr.Status.UserInfo, nil
}

func (ts *testServer) createSA(t *testing.T, ns, name string) *corev1.ServiceAccount {
	t.Helper()
	sa, err := ts.client.CoreV1().ServiceAccounts(ns).Create(ctxT(t), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

func (ts *testServer) token(t *testing.T, ns, sa string, spec authenticationv1.TokenRequestSpec) *authenticationv1.TokenRequest {
	t.Helper()
	tr, err := ts.client.CoreV1().ServiceAccounts(ns).CreateToken(ctxT(t), sa, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("CreateToken %s/%s: %v", ns, sa, err)
	}
	return tr
}

// eventuallyUnauthorized: a token stops working once the watch cache has
// seen what killed it.
func eventuallyUnauthorized(t *testing.T, c kubernetes.Interface, what string) {
	t.Helper()
	testapi.Eventually(t, 10*time.Second, what+": 401", func() bool {
		_, err := whoami(t, c)
		return apierrors.IsUnauthorized(err)
	})
}

// TestServiceAccountToken: a TokenRequest's token authenticates as the
// service account, with its groups, until the account is deleted.
func TestServiceAccountToken(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	sa := ts.createSA(t, "default", "robot")
	before := time.Now()
	tr := ts.token(t, "default", "robot", authenticationv1.TokenRequestSpec{})
	if tr.Status.Token == "" || tr.Spec.ExpirationSeconds == nil || *tr.Spec.ExpirationSeconds != 3600 ||
		!slices.Equal(tr.Spec.Audiences, []string{"https://kubernetes.default.svc"}) {
		t.Fatalf("token request defaults: %+v", tr.Spec)
	}
	if exp := tr.Status.ExpirationTimestamp.Time; exp.Before(before.Add(59*time.Minute)) || exp.After(time.Now().Add(61*time.Minute)) {
		t.Errorf("expires %s, want in an hour", exp)
	}
	robot := ts.asToken(tr.Status.Token)
	u, err := whoami(t, robot)
	if err != nil {
		t.Fatal(err)
	}
	if u.Username != "system:serviceaccount:default:robot" || u.UID != string(sa.UID) ||
		!slices.Equal(u.Groups, []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}) {
		t.Errorf("whoami: %+v", u)
	}
	if id := u.Extra["authentication.kubernetes.io/credential-id"]; len(id) != 1 || !strings.HasPrefix(id[0], "JTI=") {
		t.Errorf("credential-id extra: %v", u.Extra)
	}

	// A capped lifetime, a refused one, a missing account.
	long := ts.token(t, "default", "robot", authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr[int64](7 * 24 * 3600)})
	if *long.Spec.ExpirationSeconds != 24*3600 {
		t.Errorf("a week asked: %d s granted, want a day", *long.Spec.ExpirationSeconds)
	}
	short := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr[int64](60)}}
	if _, err := ts.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "robot", short, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("60 s token: %v, want Invalid", err)
	}
	if _, err := ts.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "nobody", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("token for a missing account: %v, want NotFound", err)
	}
	// Another audience is not the API server's: refused by it.
	other := ts.token(t, "default", "robot", authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}})
	if _, err := whoami(t, ts.asToken(other.Status.Token)); !apierrors.IsUnauthorized(err) {
		t.Errorf("token for audience vault: %v, want 401", err)
	}

	if err := ts.client.CoreV1().ServiceAccounts("default").Delete(ctx, "robot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyUnauthorized(t, robot, "deleted service account")
	// The same name again is another account: the old token stays dead.
	ts.createSA(t, "default", "robot")
	time.Sleep(300 * time.Millisecond) // the cache has the new account
	if _, err := whoami(t, robot); !apierrors.IsUnauthorized(err) {
		t.Errorf("token of a recreated account: %v, want 401", err)
	}
}

// TestServiceAccountTokenRBAC: service accounts get what stored RBAC
// bindings grant, including the right to ask for tokens.
func TestServiceAccountTokenRBAC(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	ts.createSA(t, "default", "reader")
	reader := ts.asToken(ts.token(t, "default", "reader", authenticationv1.TokenRequestSpec{}).Status.Token)
	if _, err := reader.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list nodes without a binding: %v, want Forbidden", err)
	}
	if _, err := reader.CoreV1().ServiceAccounts("default").CreateToken(ctx, "reader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("create token without a binding: %v, want Forbidden", err)
	}
	rbac := ts.client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "node-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader-nodes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "node-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "reader"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Role in default, bound without a namespace on the subject: the
	// binding's own.
	if _, err := rbac.Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tokens"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{"reader"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reader-tokens"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tokens"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "reader"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, 10*time.Second, "list nodes allowed by the binding", func() bool {
		_, err := reader.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil
	})
	if _, err := reader.CoreV1().ServiceAccounts("default").CreateToken(ctx, "reader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{}); err != nil {
		t.Errorf("create own token with the Role: %v", err)
	}
	for what, err := range map[string]error{
		"get a node (only list is granted)": func() error { _, err := reader.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{}); return err }(),
		"list pods":                         func() error { _, err := reader.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); return err }(),
		"token of another account (resourceNames)": func() error {
			_, err := reader.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
	// The token file's users are not held to RBAC.
	if _, err := ts.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("admin lists pods: %v", err)
	}
}

// TestBoundServiceAccountToken: a token bound to a pod names it and dies
// with it; binding checks the pod exists and runs as the account.
func TestBoundServiceAccountToken(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	ts.createSA(t, "default", "app")
	pods := ts.client.CoreV1().Pods("default")
	pod, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{ServiceAccountName: "app",
		Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "p"}
	tr := ts.token(t, "default", "app", authenticationv1.TokenRequestSpec{BoundObjectRef: ref})
	if tr.Spec.BoundObjectRef.UID != pod.UID {
		t.Errorf("bound ref %+v, want the pod's uid %s", tr.Spec.BoundObjectRef, pod.UID)
	}
	app := ts.asToken(tr.Status.Token)
	u, err := whoami(t, app)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Extra["authentication.kubernetes.io/pod-name"]; !slices.Equal(got, []string{"p"}) {
		t.Errorf("pod-name extra: %v", u.Extra)
	}
	for what, spec := range map[string]*authenticationv1.BoundObjectReference{
		"a missing pod":     {Kind: "Pod", APIVersion: "v1", Name: "nope"},
		"another pod's uid": {Kind: "Pod", APIVersion: "v1", Name: "p", UID: "0000"},
		"a Secret":          {Kind: "Secret", APIVersion: "v1", Name: "s"},
	} {
		_, err := ts.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "app", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: spec}}, metav1.CreateOptions{})
		if err == nil {
			t.Errorf("token bound to %s: issued", what)
		}
	}
	ts.createSA(t, "default", "other")
	wrongSA := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: ref}}
	if _, err := ts.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "other", wrongSA, metav1.CreateOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("token of another account bound to the pod: %v, want BadRequest", err)
	}

	if err := pods.Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventuallyUnauthorized(t, app, "deleted pod")
}

// TestServiceAccountTokenTamperedExpiredAndRestart: the signature and the
// lifetime are checked, and the key outlives a restart.
func TestServiceAccountTokenTamperedExpiredAndRestart(t *testing.T) {
	ts := startServer(t)
	sa := ts.createSA(t, "default", "robot")
	tr := ts.token(t, "default", "robot", authenticationv1.TokenRequestSpec{})

	parts := strings.Split(tr.Status.Token, ".")
	flipped := []byte(parts[2])
	flipped[10] ^= 'A' ^ 'B'
	if flipped[10] == parts[2][10] {
		flipped[10] = 'C'
	}
	if _, err := whoami(t, ts.asToken(parts[0]+"."+parts[1]+"."+string(flipped))); !apierrors.IsUnauthorized(err) {
		t.Errorf("tampered signature: %v, want 401", err)
	}
	// Signed with the server's own key, but expired a minute ago.
	key, err := satoken.LoadOrCreate(filepath.Join(ts.dir, "pki", "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	expired, err := key.Sign(satoken.Claims{Issuer: "https://kubernetes.default.svc", Subject: "system:serviceaccount:default:robot",
		Audience: []string{"https://kubernetes.default.svc"}, IssuedAt: now.Add(-time.Hour).Unix(), NotBefore: now.Add(-time.Hour).Unix(),
		Expiry: now.Add(-time.Minute).Unix(), Kubernetes: satoken.Kubernetes{Namespace: "default", ServiceAccount: satoken.Ref{Name: "robot", UID: string(sa.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whoami(t, ts.asToken(expired)); !apierrors.IsUnauthorized(err) {
		t.Errorf("expired token: %v, want 401", err)
	}

	ts.restart(t)
	u, err := whoami(t, ts.asToken(tr.Status.Token))
	if err != nil || u.Username != "system:serviceaccount:default:robot" {
		t.Errorf("token after a restart: %+v, %v", u, err)
	}
}

// TestKubectlCreateToken: `kubectl create token` gets a token that
// `kubectl auth whoami` (1.28+) and `auth can-i` answer for as the
// service account.
func TestKubectlCreateToken(t *testing.T) {
	bins := kubectlBinaries(t)
	ts := startServer(t)
	ts.createSA(t, "default", "robot")
	for _, v := range kubectlVersions {
		k := newKubectl(t, bins[v], ts.KubeconfigPath())
		t.Run("v"+v, func(t *testing.T) {
			token := strings.TrimSpace(k.ok(t, "create", "token", "robot", "--duration", "20m"))
			if !satoken.LooksLikeJWT(token) {
				t.Fatalf("kubectl create token printed %q", token)
			}
			if v != "1.27" {
				out := k.ok(t, "auth", "whoami", "--token", token)
				wantContains(t, "kubectl auth whoami", out, "system:serviceaccount:default:robot", "system:serviceaccounts:default")
			}
			out := k.fails(t, "auth", "can-i", "list", "nodes", "--token", token)
			wantContains(t, "kubectl auth can-i list nodes", out, "no")
		})
	}
}
