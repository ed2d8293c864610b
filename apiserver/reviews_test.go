package apiserver_test

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodenet/nodenet/apiserver"
)

// aliceToken is a second, non-admin identity in the test token file.
const aliceToken = "alice-token-0123456789"

// startServerWithAlice runs a server whose token file also holds alice
// (groups dev and ops), and returns a client authenticated as her.
func startServerWithAlice(t *testing.T) (*testServer, kubernetes.Interface) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.csv")
	data := "admin-token-0123456789,admin,admin,\"system:masters\"\n" + aliceToken + ",alice,u-1,\"dev,ops\"\n"
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, func(c *apiserver.Config) { c.TokenAuthFile = file })
	cfg := rest.CopyConfig(ts.config)
	cfg.BearerToken, cfg.BearerTokenFile = aliceToken, ""
	return ts, kubernetes.NewForConfigOrDie(cfg)
}

// TestSelfReviews: the review resources answer from the server's real
// identity and authorizer, are discoverable, validate as upstream, and
// store nothing.
func TestSelfReviews(t *testing.T) {
	ts, alice := startServerWithAlice(t)
	ctx := ctxT(t)
	rev := etcdRevision(t, ts)

	ssr, err := alice.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	if u := ssr.Status.UserInfo; u.Username != "alice" || u.UID != "u-1" || !slices.Equal(u.Groups, []string{"dev", "ops", "system:authenticated"}) {
		t.Errorf("alice's SelfSubjectReview: %+v", u)
	}

	for _, attrs := range []authorizationv1.SelfSubjectAccessReviewSpec{
		{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: "default"}},
		{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Group: "networking.k8s.io", Resource: "servicecidrs", Name: "kubernetes"}},
		{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/metrics"}},
	} {
		sar, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: attrs}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectAccessReview %+v: %v", attrs, err)
		}
		// Every authenticated user may do everything (authz.go's allowAll);
		// the review must say what requests get.
		if !sar.Status.Allowed || sar.Status.Denied || sar.Status.Reason == "" {
			t.Errorf("SelfSubjectAccessReview %+v: status %+v, want allowed with a reason", attrs, sar.Status)
		}
	}
	rr, err := alice.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "default"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectRulesReview: %v", err)
	}
	if len(rr.Status.ResourceRules) != 1 || !slices.Equal(rr.Status.ResourceRules[0].Verbs, []string{"*"}) || rr.Status.Incomplete {
		t.Errorf("rules %+v", rr.Status)
	}

	// Bad reviews get upstream's field errors.
	for name, tc := range map[string]struct {
		sar   authorizationv1.SelfSubjectAccessReview
		field string
	}{
		"neither":  {authorizationv1.SelfSubjectAccessReview{}, "spec"},
		"both":     {authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get"}, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get"}}}, "spec"},
		"named":    {authorizationv1.SelfSubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get"}}}, "metadata"},
		"selector": {authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", FieldSelector: &authorizationv1.FieldSelectorAttributes{}}}}, "spec.resourceAttributes.fieldSelector.requirements"},
	} {
		_, err := alice.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &tc.sar, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !slices.Equal(causeFields(err), []string{tc.field}) {
			t.Errorf("%s: %v (fields %v), want Invalid on %s", name, err, causeFields(err), tc.field)
		}
	}
	if got := etcdRevision(t, ts); got != rev {
		t.Errorf("reviews wrote to etcd (revision %d -> %d)", rev, got)
	}

	// Create-only: reading answers 405.
	code, body, err := httpGet(t, ts.config, ts.URL()+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
	if err != nil || code != http.StatusMethodNotAllowed {
		t.Errorf("GET selfsubjectaccessreviews: %d %s %v, want 405", code, body, err)
	}

	// Discoverable, so kubectl and client-go find them.
	for gv, want := range map[string][]string{
		"authorization.k8s.io/v1":  {"selfsubjectaccessreviews", "selfsubjectrulesreviews"},
		"authentication.k8s.io/v1": {"selfsubjectreviews"},
	} {
		list, err := ts.client.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatalf("discovery %s: %v", gv, err)
		}
		var got []string
		for _, r := range list.APIResources {
			if !slices.Equal(r.Verbs, []string{"create"}) || r.Namespaced {
				t.Errorf("%s %s: verbs %v namespaced %v, want create-only, cluster-scoped", gv, r.Name, r.Verbs, r.Namespaced)
			}
			got = append(got, r.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("discovery %s: %v, want %v", gv, got, want)
		}
	}
	groups, err := ts.client.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range groups.Groups {
		names = append(names, g.Name)
	}
	for _, want := range []string{"authorization.k8s.io", "authentication.k8s.io", "networking.k8s.io"} {
		if !slices.Contains(names, want) {
			t.Errorf("group %s missing from /apis: %s", want, strings.Join(names, ","))
		}
	}
}
