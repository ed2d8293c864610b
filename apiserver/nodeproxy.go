package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/apiserver/pki"
)

// nodeConnector reaches node agents on their kubelet port. The API server
// authenticates with a client certificate from its CA (CN
// pki.KubeletClientCommonName), which agents check against the CA in
// their kubeconfig. Agents serve with certificates of their own making, so
// instead of a CA the API server pins each one: the connection is used
// only when the agent's certificate has the SHA-256 the agent published in
// its Node's pki.KubeletServingCertAnnotation (see node/server.go).
type nodeConnector struct {
	once sync.Once
	cert *tls.Certificate
	err  error
}

func (s *Server) kubeletClientCert() (*tls.Certificate, error) {
	s.nodes.once.Do(func() {
		s.nodes.cert, s.nodes.err = pki.EnsureKubeletClient(filepath.Join(s.cfg.DataDir, "pki"))
	})
	return s.nodes.cert, s.nodes.err
}

// errNodeUnreachable says why a node's agent cannot be asked.
func errNodeUnreachable(node, why string) error {
	return apierrors.NewServiceUnavailable(fmt.Sprintf("cannot reach the agent of node %q: %s", node, why))
}

// nodeRequest sends GET path?query to the agent of nodeName and returns
// the response for the caller to stream; the body is closed when ctx ends.
func (s *Server) nodeRequest(ctx context.Context, nodeName, path string, query url.Values) (*http.Response, error) {
	obj, err := s.getObject(ctx, &apiRequest{res: s.byGV[coreV1]["nodes"], name: nodeName}, "")
	if apierrors.IsNotFound(err) {
		return nil, errNodeUnreachable(nodeName, "the node does not exist")
	}
	if err != nil {
		return nil, err
	}
	node := obj.(*corev1.Node)
	addr := ""
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			addr = a.Address
			break
		}
	}
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	pin := node.Annotations[pki.KubeletServingCertAnnotation]
	switch {
	case addr == "":
		return nil, errNodeUnreachable(nodeName, "it reports no InternalIP")
	case port <= 0:
		return nil, errNodeUnreachable(nodeName, "it reports no kubelet port (status.daemonEndpoints.kubeletEndpoint.port); its agent serves no logs")
	case pin == "":
		return nil, errNodeUnreachable(nodeName, "it publishes no serving certificate pin ("+pki.KubeletServingCertAnnotation+")")
	}
	cert, err := s.kubeletClientCert()
	if err != nil {
		return nil, fmt.Errorf("kubelet client certificate: %w", err)
	}
	dial := s.cfg.DialNode
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	tr := &http.Transport{
		DialContext: dial,
		TLSClientConfig: &tls.Config{
			Certificates: []tls.Certificate{*cert},
			MinVersion:   tls.VersionTLS12,
			// The chain is not verified against a CA (there is none for
			// agent certificates); VerifyPeerCertificate pins instead.
			InsecureSkipVerify: true,
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				if len(raw) == 0 || pki.Fingerprint(raw[0]) != pin {
					return errors.New("the agent's certificate does not match the pin published in its Node")
				}
				return nil
			},
		},
		ResponseHeaderTimeout: 30 * time.Second,
		DisableKeepAlives:     true,
	}
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(addr, strconv.Itoa(int(port))), Path: path, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("build node request: %w", err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, errNodeUnreachable(nodeName, err.Error())
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, agentError(resp.StatusCode, string(msg))
	}
	return resp, nil
}

// agentError turns an agent's plain-text refusal into an API status with
// the agent's message, as kube-apiserver relays the kubelet's.
func agentError(code int, msg string) error {
	reason := metav1.StatusReasonInternalError
	switch code {
	case http.StatusBadRequest:
		reason = metav1.StatusReasonBadRequest
	case http.StatusNotFound:
		reason = metav1.StatusReasonNotFound
	case http.StatusForbidden, http.StatusUnauthorized:
		reason, msg = metav1.StatusReasonForbidden, "the node agent refused the API server: "+msg
	}
	for len(msg) > 0 && (msg[len(msg)-1] == '\n') {
		msg = msg[:len(msg)-1]
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg}}
}
