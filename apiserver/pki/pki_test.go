package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func leafOf(t *testing.T, c *tls.Certificate) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

func pool(t *testing.T, caPEM []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(caPEM) {
		t.Fatalf("CA PEM does not parse: %q", caPEM)
	}
	return p
}

func TestEnsureIssuesAndReuses(t *testing.T) {
	dir := t.TempDir()
	f := FilesIn(dir)
	hosts := []string{"127.0.0.1", "::1", "localhost", "kubernetes.default.svc"}
	cert, caPEM, err := Ensure(f, hosts)
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, cert)
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, caPEM), DNSName: h}); err != nil {
			t.Errorf("serving certificate for %s: %v", h, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, caPEM), DNSName: "elsewhere.example"}); err == nil {
		t.Error("serving certificate valid for a host it was not issued for")
	}
	for path, want := range map[string]os.FileMode{f.CAKey: 0o600, f.ServingKey: 0o600, f.CACert: 0o644, f.ServingCert: 0o644} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v mode %v, want %v", path, err, fi.Mode().Perm(), want)
		}
	}

	// A restart with the same hosts keeps everything.
	again, caAgain, err := Ensure(f, hosts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Certificate[0], cert.Certificate[0]) || !bytes.Equal(caAgain, caPEM) {
		t.Error("second Ensure re-issued an unchanged certificate")
	}
	// A new host re-issues the serving certificate from the same CA, so
	// kubeconfigs that trust the CA keep working.
	more := append(hosts, "10.96.0.1")
	reissued, caAfter, err := Ensure(f, more)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(reissued.Certificate[0], cert.Certificate[0]) || !bytes.Equal(caAfter, caPEM) {
		t.Fatal("a new host did not re-issue the serving certificate, or changed the CA")
	}
	if _, err := leafOf(t, reissued).Verify(x509.VerifyOptions{Roots: pool(t, caPEM), DNSName: "10.96.0.1"}); err != nil {
		t.Errorf("re-issued certificate for the new host: %v", err)
	}
}

// TestEnsureRenewsBeforeExpiry: a serving certificate with less than 30
// days left is replaced at start.
func TestEnsureRenewsBeforeExpiry(t *testing.T) {
	f := FilesIn(t.TempDir())
	if _, _, err := Ensure(f, []string{"localhost"}); err != nil {
		t.Fatal(err)
	}
	ca, caKey, _, err := loadOrCreateCA(f)
	if err != nil {
		t.Fatal(err)
	}
	servingKey, err := tls.LoadX509KeyPair(f.ServingCert, f.ServingKey)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "nodenet-apiserver"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, servingKey.Leaf.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := writePEM(f.ServingCert, "CERTIFICATE", der, 0o644); err != nil {
		t.Fatal(err)
	}
	renewed, _, err := Ensure(f, []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(leafOf(t, renewed).NotAfter); left < 365*24*time.Hour {
		t.Errorf("certificate with 10 days left kept (%v left now)", left)
	}
}

func TestEnsureRejectsDamagedCA(t *testing.T) {
	for name, damage := range map[string]func(f Files) error{
		"not PEM": func(f Files) error { return os.WriteFile(f.CACert, []byte("garbage"), 0o644) },
		"wrong block": func(f Files) error {
			return os.WriteFile(f.CAKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("nope")}), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := FilesIn(t.TempDir())
			if _, _, err := Ensure(f, []string{"localhost"}); err != nil {
				t.Fatal(err)
			}
			if err := damage(f); err != nil {
				t.Fatal(err)
			}
			_, _, err := Ensure(f, []string{"localhost"})
			if err == nil || !strings.Contains(err.Error(), filepath.Dir(f.CACert)) {
				t.Errorf("damaged CA: %v, want an error naming the file", err)
			}
		})
	}
}

// TestKubeletClientHandshake: the API server's client certificate and an
// agent's pinned serving certificate complete a mutual TLS handshake, and
// the agent sees the expected identity.
func TestKubeletClientHandshake(t *testing.T) {
	dir := t.TempDir()
	serving, caPEM, err := Ensure(FilesIn(dir), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	client, err := EnsureKubeletClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	cl := leafOf(t, client)
	if cl.Subject.CommonName != KubeletClientCommonName || len(cl.ExtKeyUsage) != 1 || cl.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("client certificate %v %v", cl.Subject, cl.ExtKeyUsage)
	}
	if _, err := cl.Verify(x509.VerifyOptions{Roots: pool(t, caPEM), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate not from the API server's CA: %v", err)
	}
	if again, err := EnsureKubeletClient(dir); err != nil || !bytes.Equal(again.Certificate[0], client.Certificate[0]) {
		t.Errorf("second EnsureKubeletClient re-issued: %v", err)
	}

	pin := Fingerprint(serving.Certificate[0])
	if sum := sha256.Sum256(serving.Certificate[0]); pin != hex.EncodeToString(sum[:]) || len(pin) != 64 {
		t.Errorf("fingerprint %q", pin)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	server := tls.Server(a, &tls.Config{Certificates: []tls.Certificate{*serving}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool(t, caPEM)})
	cli := tls.Client(b, &tls.Config{Certificates: []tls.Certificate{*client}, InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if Fingerprint(raw[0]) != pin {
				t.Error("agent presented another certificate")
			}
			return nil
		}})
	errc := make(chan error, 1)
	go func() { errc <- cli.Handshake() }()
	if err := server.Handshake(); err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if cn := server.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != KubeletClientCommonName {
		t.Errorf("agent sees client %q", cn)
	}
}

func TestKubeconfigLoads(t *testing.T) {
	_, caPEM, err := Ensure(FilesIn(t.TempDir()), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	tok := NewToken()
	if len(tok) != 48 || tok == NewToken() {
		t.Errorf("token %q: want 48 random hex digits", tok)
	}
	cfg, err := clientcmd.Load(Kubeconfig("https://127.0.0.1:6443", caPEM, "admin", tok))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://127.0.0.1:6443" || rc.BearerToken != tok || !bytes.Equal(rc.TLSClientConfig.CAData, caPEM) {
		t.Errorf("kubeconfig gives host %q token %q CA %d bytes", rc.Host, rc.BearerToken, len(rc.TLSClientConfig.CAData))
	}
}
