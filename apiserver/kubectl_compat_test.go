package apiserver_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/controllers/endpoints"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

// TestKubectlUpstreamResources drives the real kubectl clients at what
// issue 11 found missing: ServiceCIDRs and IPAddresses, Endpoints (filled
// by the endpoints controller), auth can-i and auth whoami.
func TestKubectlUpstreamResources(t *testing.T) {
	nettest.SkipShort(t, "runs kubectl over every upstream resource")
	bins := kubectlBinaries(t)
	ts, _ := startServerWithAlice(t)
	ctx := ctxT(t)

	// Endpoints come from the controller manager's endpoints controller,
	// which mirrors the Service's slices.
	testapi.RunController(t, ts.client, endpoints.ControllerName, 1, func(f informers.SharedInformerFactory, r record.EventRecorder) (testapi.Runner, error) {
		return endpoints.New(ts.client, f, r, testapi.Logger())
	})
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := ts.client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}},
			{Addresses: []string{"10.244.2.6"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	if _, err := ts.client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, 30*time.Second, "endpoints of web filled", func() bool {
		ep, err := ts.client.CoreV1().Endpoints("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && len(ep.Subsets) == 1 && len(ep.Subsets[0].Addresses) == 2
	})
	aliceKubeconfig := kubeconfigWithToken(t, ts.KubeconfigPath(), aliceToken)

	for _, v := range kubectlVersions {
		k := newKubectl(t, bins[v], ts.KubeconfigPath())
		t.Run("v"+v, func(t *testing.T) {
			out := k.ok(t, "get", "endpoints", "-n", "default")
			wantColumns(t, "get endpoints", out, "NAME", "ENDPOINTS", "AGE")
			if row := kubectlRow(t, out, "NAME", "web"); row["ENDPOINTS"] != "10.244.1.5:8080,10.244.2.6:8080" {
				t.Errorf("get endpoints web: %v", row)
			}
			wantContains(t, "get ep -o yaml", k.ok(t, "get", "ep", "web", "-o", "yaml"), "endpoints.kubernetes.io/managed-by: endpoint-controller")

			out = k.ok(t, "get", "servicecidrs")
			if row := kubectlRow(t, out, "NAME", "kubernetes"); row["CIDRS"] != "10.96.0.0/12" {
				t.Errorf("get servicecidrs: %v", row)
			}
			out = k.ok(t, "get", "ipaddresses")
			if row := kubectlRow(t, out, "NAME", "10.96.0.1"); row["PARENTREF"] != "services/default/kubernetes" {
				t.Errorf("get ipaddresses: %v", row)
			}
			wantContains(t, "delete ipaddress", k.fails(t, "delete", "ipaddress", "10.96.0.1"), "change only with their Service")

			if out := k.ok(t, "auth", "can-i", "create", "pods"); strings.TrimSpace(out) != "yes" {
				t.Errorf("auth can-i create pods: %q, want yes", out)
			}
			if out := k.ok(t, "auth", "can-i", "delete", "servicecidrs.networking.k8s.io", "--all-namespaces"); strings.TrimSpace(out) != "yes" {
				t.Errorf("auth can-i delete servicecidrs: %q, want yes", out)
			}
			wantContains(t, "auth can-i --list", k.ok(t, "auth", "can-i", "--list"), "*.*")

			alice := newKubectl(t, bins[v], aliceKubeconfig)
			if v == "1.27" {
				// kubectl 1.27 knows only the alpha and beta SelfSubjectReview;
				// like kube-apiserver 1.37 (which leaves v1beta1 off) this
				// server serves v1, which kubectl uses from 1.28 on.
				wantContains(t, "auth whoami 1.27", alice.fails(t, "auth", "whoami"), "selfsubjectreviews API is not enabled")
				return
			}
			out = alice.ok(t, "auth", "whoami")
			wantContains(t, "auth whoami", out, "alice", "u-1", "[dev ops system:authenticated]")
			out = k.ok(t, "auth", "whoami")
			wantContains(t, "auth whoami (admin)", out, "admin", "[system:masters system:authenticated]")
		})
	}
}

// kubeconfigWithToken writes a copy of kubeconfig that authenticates with
// token instead.
func kubeconfigWithToken(t *testing.T, kubeconfig, token string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Token, ai.TokenFile = token, ""
	}
	path := filepath.Join(t.TempDir(), "other.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
