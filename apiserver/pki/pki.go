package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nodenet/nodenet/internal/atomicfile"
)

// Files names what Ensure keeps in a directory.
type Files struct {
	CACert, CAKey, ServingCert, ServingKey string
}

// FilesIn returns the standard file names inside dir.
func FilesIn(dir string) Files {
	return Files{
		CACert:      filepath.Join(dir, "ca.crt"),
		CAKey:       filepath.Join(dir, "ca.key"),
		ServingCert: filepath.Join(dir, "apiserver.crt"),
		ServingKey:  filepath.Join(dir, "apiserver.key"),
	}
}

// Ensure loads or creates the CA and a serving certificate valid for hosts
// (IPs or DNS names). A serving certificate that lacks one of hosts is
// re-issued from the same CA, so existing kubeconfigs keep working.
func Ensure(f Files, hosts []string) (*tls.Certificate, []byte, error) {
	caCert, caKey, caPEM, err := loadOrCreateCA(f)
	if err != nil {
		return nil, nil, err
	}
	if cert, err := tls.LoadX509KeyPair(f.ServingCert, f.ServingKey); err == nil {
		if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil && covers(leaf, hosts) && time.Until(leaf.NotAfter) > 30*24*time.Hour {
			return &cert, caPEM, nil
		}
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "nodenet-apiserver"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if _, _, err := issue("serving", tmpl, 5*365*24*time.Hour, caCert, caKey, f.ServingCert, f.ServingKey); err != nil {
		return nil, nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.ServingCert, f.ServingKey)
	if err != nil {
		return nil, nil, fmt.Errorf("load serving certificate: %w", err)
	}
	return &cert, caPEM, nil
}

func covers(leaf *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(leaf.IPAddresses, func(x net.IP) bool { return x.Equal(ip) }) {
				return false
			}
		} else if h != "" && !slices.Contains(leaf.DNSNames, h) {
			return false
		}
	}
	return true
}

func loadOrCreateCA(f Files) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	certPEM, cerr := os.ReadFile(f.CACert)
	keyPEM, kerr := os.ReadFile(f.CAKey)
	if cerr == nil && kerr == nil {
		cb, _ := pem.Decode(certPEM)
		kb, _ := pem.Decode(keyPEM)
		if cb == nil || kb == nil {
			return nil, nil, nil, fmt.Errorf("CA files %s/%s are not PEM", f.CACert, f.CAKey)
		}
		cert, err := x509.ParseCertificate(cb.Bytes)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("parse CA certificate %s: %w", f.CACert, err)
		}
		key, err := x509.ParseECPrivateKey(kb.Bytes)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("parse CA key %s: %w", f.CAKey, err)
		}
		return cert, key, certPEM, nil
	}
	if !errors.Is(cerr, os.ErrNotExist) && cerr != nil {
		return nil, nil, nil, fmt.Errorf("read CA certificate: %w", cerr)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "nodenet-ca"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, key, err := issue("CA", tmpl, 10*365*24*time.Hour, nil, nil, f.CACert, f.CAKey)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// issue generates a P-256 key and a certificate for it from tmpl, valid
// from an hour ago (for clock skew) for validity and signed by parent's
// key (parent nil: self-signed), and writes both, key first. what names
// the certificate in errors ("serving").
func issue(what string, tmpl *x509.Certificate, validity time.Duration, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, certPath, keyPath string) (der []byte, key *ecdsa.PrivateKey, err error) {
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate %s key: %w", what, err)
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(validity)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %s certificate: %w", what, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s key: %w", what, err)
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", kder, 0o600); err != nil {
		return nil, nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	return der, key, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return WriteFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// WriteFileAtomic writes credentials so a crash never leaves half a file.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	return atomicfile.Write(path, data, mode)
}

// NewToken returns a random bearer token.
func NewToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
