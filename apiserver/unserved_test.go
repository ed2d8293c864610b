package apiserver_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUnservedPathsAnswerLikeKubeAPIServer: an unknown resource, an unknown
// subresource and an unserved group or version are paths kube-apiserver does
// not serve: 404 with "the server could not find the requested resource",
// never a "<resource> <name> not found" about some other object.
func TestUnservedPathsAnswerLikeKubeAPIServer(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	rc := ts.client.CoreV1().RESTClient()
	for _, p := range []string{
		"/api/v1/namespaces/default/widgets",
		"/api/v1/namespaces/default/widgets/w1",
		"/api/v1/widgets",
		"/api/v1/namespaces/default/nodes", // a cluster-scoped resource under a namespace
		"/api/v1/namespaces/default/pods/p/widgets",
		"/api/v1/nodes/n/widgets",
		"/api/v2/pods",
		"/apis/apps/v1/namespaces/default/deployments", // apps/v1 is served, deployments are not
		"/apis/apps/v1/deployments",
		"/apis/apps/v1/namespaces/default/daemonsets/ds/scale",
		"/apis/batch/v1",
		"/apis/batch",
		"/apis/discovery.k8s.io/v1beta1/endpointslices",
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			var code int
			body, err := rc.Verb(method).AbsPath(p).Body([]byte("{}")).Do(ctx).StatusCode(&code).Raw()
			if err == nil {
				t.Errorf("%s %s: succeeded, want 404", method, p)
				continue
			}
			var st metav1.Status
			if jerr := json.Unmarshal(body, &st); jerr != nil {
				t.Errorf("%s %s: body %q is not a Status: %v", method, p, body, jerr)
				continue
			}
			if code != http.StatusNotFound || st.Code != http.StatusNotFound || st.Reason != metav1.StatusReasonNotFound ||
				st.Message != "the server could not find the requested resource" {
				t.Errorf("%s %s: %d %+v, want 404 NotFound \"the server could not find the requested resource\"", method, p, code, st)
			}
		}
	}
}

// TestKubectlUnservedResources: the real clients say which resource type
// the server lacks, for unserved groups and unknown resources alike.
func TestKubectlUnservedResources(t *testing.T) {
	bins := kubectlBinaries(t)
	ts := startServer(t)
	for _, v := range kubectlVersions {
		k := newKubectl(t, bins[v], ts.KubeconfigPath())
		t.Run("v"+v, func(t *testing.T) {
			out := k.fails(t, "get", "deployments")
			wantContains(t, "kubectl get deployments", out, `the server doesn't have a resource type "deployments"`)
			out = k.fails(t, "get", "widgets", "-n", "default")
			wantContains(t, "kubectl get widgets", out, `the server doesn't have a resource type "widgets"`)
			out = k.fails(t, "get", "--raw", "/api/v1/namespaces/default/widgets")
			wantContains(t, "kubectl get --raw .../widgets", out, "NotFound", "the server could not find the requested resource")
			if strings.Contains(out, `"default" not found`) {
				t.Errorf("kubectl get --raw .../widgets blames namespace default:\n%s", out)
			}
		})
	}
}
