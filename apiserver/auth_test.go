package apiserver_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// otherCA returns a freshly made CA certificate that signed nothing the
// server uses.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "not-the-nodenet-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func httpGet(t *testing.T, cfg *rest.Config, url string) (int, string, error) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("http client: %v", err)
	}
	hc.Timeout = 10 * time.Second
	resp, err := hc.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

func TestAuthentication(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	if len(ts.config.CAData) == 0 && ts.config.CAFile == "" {
		t.Fatal("the kubeconfig carries no CA")
	}

	t.Run("no token or a wrong token is 401", func(t *testing.T) {
		for name, token := range map[string]string{"no token": "", "wrong token": "not-a-valid-token", "admin token with a suffix": ts.config.BearerToken + "x"} {
			cfg := rest.CopyConfig(ts.config)
			cfg.BearerToken, cfg.BearerTokenFile = token, ""
			c := kubernetes.NewForConfigOrDie(cfg)
			_, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if !apierrors.IsUnauthorized(err) {
				t.Errorf("%s: list namespaces: got %v, want 401", name, err)
			}
			rev := etcdRevision(t, ts)
			_, err = c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}}, metav1.CreateOptions{})
			if !apierrors.IsUnauthorized(err) {
				t.Errorf("%s: create: got %v, want 401", name, err)
			}
			if got := etcdRevision(t, ts); got != rev {
				t.Errorf("%s: unauthenticated create wrote to etcd", name)
			}
			code, _, err := httpGet(t, cfg, ts.URL()+"/api/v1/namespaces/default/configmaps?watch=true")
			if err != nil || code != http.StatusUnauthorized {
				t.Errorf("%s: watch: code %d err %v, want 401", name, code, err)
			}
			code, _, err = httpGet(t, cfg, ts.URL()+"/metrics")
			if err != nil || code != http.StatusUnauthorized {
				t.Errorf("%s: /metrics: code %d err %v, want 401", name, code, err)
			}
		}
		if _, err := ts.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("the admin token: %v", err)
		}
	})

	t.Run("health and version are anonymous over verified TLS", func(t *testing.T) {
		anon := rest.AnonymousClientConfig(ts.config)
		if anon.BearerToken != "" || anon.TLSClientConfig.Insecure {
			t.Fatalf("anonymous config: token %q insecure %v", anon.BearerToken, anon.TLSClientConfig.Insecure)
		}
		for _, path := range []string{"/healthz", "/livez", "/readyz"} {
			code, body, err := httpGet(t, anon, ts.URL()+path)
			if err != nil || code != http.StatusOK || body != "ok" {
				t.Errorf("%s: code %d body %q err %v", path, code, body, err)
			}
		}
		code, body, err := httpGet(t, anon, ts.URL()+"/version")
		if err != nil || code != http.StatusOK {
			t.Fatalf("/version: code %d err %v", code, err)
		}
		var v version.Info
		if err := json.Unmarshal([]byte(body), &v); err != nil || v.GitVersion == "" {
			t.Errorf("/version: %q does not decode to a version.Info with gitVersion: %v", body, err)
		}
		// client-go's discovery reads /version the same way.
		sv, err := kubernetes.NewForConfigOrDie(anon).Discovery().ServerVersion()
		if err != nil || sv.GitVersion != v.GitVersion {
			t.Errorf("discovery ServerVersion: %v %v", sv, err)
		}
		// Anonymous requests stop at the health endpoints.
		code, _, err = httpGet(t, anon, ts.URL()+"/api/v1/namespaces")
		if err != nil || code != http.StatusUnauthorized {
			t.Errorf("anonymous list: code %d err %v, want 401", code, err)
		}
	})

	t.Run("metrics need a token", func(t *testing.T) {
		body, err := ts.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatalf("/metrics with the admin token: %v", err)
		}
		if !strings.Contains(string(body), "apiserver_request_total") {
			t.Errorf("/metrics lacks apiserver_request_total:\n%.500s", body)
		}
		code, _, err := httpGet(t, rest.AnonymousClientConfig(ts.config), ts.URL()+"/metrics")
		if err != nil || code != http.StatusUnauthorized {
			t.Errorf("anonymous /metrics: code %d err %v, want 401", code, err)
		}
	})

	t.Run("a client trusting another CA refuses the server", func(t *testing.T) {
		cfg := rest.AnonymousClientConfig(ts.config)
		cfg.CAFile, cfg.CAData = "", otherCA(t)
		_, _, err := httpGet(t, cfg, ts.URL()+"/healthz")
		var unknown x509.UnknownAuthorityError
		if err == nil || !errors.As(err, &unknown) {
			t.Fatalf("TLS with the wrong CA: got %v, want x509.UnknownAuthorityError", err)
		}
		// With the token too: the token is never sent to an unverified server.
		cfg = rest.CopyConfig(ts.config)
		cfg.CAFile, cfg.CAData = "", otherCA(t)
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("client-go with the wrong CA: got %v, want a certificate error", err)
		}
	})
}
