package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nodenet/nodenet/apiserver/pki"
)

// The kubelet port. The agent serves container logs over HTTPS, as the
// kubelet does, and trusts exactly one caller: the API server.
//
// Who may call: the agent requires a client certificate that chains to
// the cluster CA (ClientCA, by default the CA in the agent's kubeconfig,
// which is the API server's CA) and names pki.KubeletClientCommonName.
// The API server's CA also signs its own serving certificate, but that one
// is for server auth only and Go's verification refuses it as a client
// certificate; a bearer token would have meant a second secret to
// distribute, while every agent already holds the CA.
//
// How the API server knows the agent: the agent has no way to get a
// certificate from the cluster CA (that would need the CA key or a
// CSR-signing controller), so it keeps a CA of its own in
// <state-dir>/pki, serves with a certificate from it, and publishes the
// certificate's SHA-256 in the Node annotation
// pki.KubeletServingCertAnnotation. The API server pins that: it accepts
// the connection only when the presented certificate has the published
// fingerprint. The annotation is written with the node's credentials, the
// same trust the API server gives the node's InternalIP and port.
//
// Without a client CA the port stays closed: an agent that cannot tell
// the API server from anyone else serves nothing.

// kubeletServer is the agent's HTTPS listener and its pin.
type kubeletServer struct {
	ln          net.Listener
	port        int
	fingerprint string
}

func (a *Agent) listenKubelet() (*kubeletServer, error) {
	if a.o.KubeletPort == 0 {
		return nil, nil
	}
	if len(a.o.ClientCA) == 0 {
		a.log.Warn("kubelet port disabled: no client CA to authenticate the API server with (give --client-ca-file or a kubeconfig with a certificate authority)")
		return nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(a.o.ClientCA) {
		return nil, errors.New("client CA: no PEM certificate found")
	}
	cert, _, err := pki.Ensure(pki.Files{
		CACert: filepath.Join(a.o.StateDir, "pki", "ca.crt"), CAKey: filepath.Join(a.o.StateDir, "pki", "ca.key"),
		ServingCert: filepath.Join(a.o.StateDir, "pki", "kubelet.crt"), ServingKey: filepath.Join(a.o.StateDir, "pki", "kubelet.key"),
	}, []string{a.o.NodeIP, a.o.NodeName})
	if err != nil {
		return nil, fmt.Errorf("kubelet serving certificate: %w", err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{*cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cn := cs.PeerCertificates[0].Subject.CommonName; cn != pki.KubeletClientCommonName {
				return fmt.Errorf("client %q is not the API server", cn)
			}
			return nil
		},
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(a.o.KubeletAddress, strconv.Itoa(a.o.KubeletPort)))
	if err != nil {
		return nil, fmt.Errorf("listen on the kubelet port: %w", err)
	}
	return &kubeletServer{ln: tls.NewListener(ln, cfg), port: ln.Addr().(*net.TCPAddr).Port, fingerprint: pki.Fingerprint(cert.Certificate[0])}, nil
}

// serveKubelet serves until ctx ends.
func (a *Agent) serveKubelet(ctx context.Context, ks *kubeletServer) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/", a.serveContainerLogs)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelDebug)}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ks.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Error("kubelet port failed", "err", err)
	}
}
