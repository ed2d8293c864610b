package pki

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"time"
)

// KubeletClientCommonName is the identity the API server presents to node
// agents (the kubelet port) with a client certificate from its CA. Agents
// accept this name only.
const KubeletClientCommonName = "nodenet:apiserver-kubelet-client"

// KubeletServingCertAnnotation on a Node holds the SHA-256 (hex) of the
// certificate its agent serves the kubelet port with; the API server pins
// it when it connects.
const KubeletServingCertAnnotation = "nodenet.io/kubelet-serving-cert-sha256"

// Fingerprint is the pin of a certificate: hex SHA-256 of its DER.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// EnsureKubeletClient loads or issues, from the CA in dir, the client
// certificate the API server uses towards node agents
// (apiserver-kubelet-client.crt/key, as kubeadm names it).
func EnsureKubeletClient(dir string) (*tls.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, "apiserver-kubelet-client.crt"), filepath.Join(dir, "apiserver-kubelet-client.key")
	if cert, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil && time.Until(leaf.NotAfter) > 30*24*time.Hour {
			return &cert, nil
		}
	}
	caCert, caKey, _, err := loadOrCreateCA(FilesIn(dir))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: KubeletClientCommonName, Organization: []string{"system:masters"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if _, _, err := issue("kubelet client", tmpl, 5*365*24*time.Hour, caCert, caKey, certPath, keyPath); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("load kubelet client certificate: %w", err)
	}
	return &cert, nil
}
