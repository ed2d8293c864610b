package satoken

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nodenet/nodenet/internal/atomicfile"
)

// Claims are a token's payload, named as kube-apiserver names them.
type Claims struct {
	Issuer     string     `json:"iss"`
	Subject    string     `json:"sub"`
	Audience   []string   `json:"aud"`
	Expiry     int64      `json:"exp"`
	IssuedAt   int64      `json:"iat"`
	NotBefore  int64      `json:"nbf"`
	ID         string     `json:"jti,omitempty"`
	Kubernetes Kubernetes `json:"kubernetes.io"`
}

// Kubernetes is the private "kubernetes.io" claim.
type Kubernetes struct {
	Namespace      string `json:"namespace"`
	ServiceAccount Ref    `json:"serviceaccount"`
	// Pod is set for a token bound to a pod: it dies with the pod.
	Pod *Ref `json:"pod,omitempty"`
}

// Ref names an object and pins its incarnation.
type Ref struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// ErrInvalid is what every refused token wraps: the caller answers 401
// whatever the detail.
var ErrInvalid = errors.New("invalid service account token")

// Key signs and verifies tokens.
type Key struct {
	priv *ecdsa.PrivateKey
	kid  string
}

// LoadOrCreate reads the PEM EC private key at path, creating it (mode
// 0600) when the file does not exist.
func LoadOrCreate(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		priv, gerr := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if gerr != nil {
			return nil, fmt.Errorf("generate service account key: %w", gerr)
		}
		der, merr := x509.MarshalECPrivateKey(priv)
		if merr != nil {
			return nil, fmt.Errorf("encode service account key: %w", merr)
		}
		if werr := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); werr != nil {
			return nil, fmt.Errorf("write service account key: %w", werr)
		}
		return newKey(priv)
	}
	if err != nil {
		return nil, fmt.Errorf("read service account key: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("service account key %s: no EC PRIVATE KEY block", path)
	}
	priv, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse service account key %s: %w", path, err)
	}
	if priv.Curve != elliptic.P256() {
		return nil, fmt.Errorf("service account key %s: want a P-256 key", path)
	}
	return newKey(priv)
}

// newKey derives the key ID as kube-apiserver does: the unpadded base64url
// SHA-256 of the public key's DER, so verifiers can tell keys apart.
func newKey(priv *ecdsa.PrivateKey) (*Key, error) {
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encode service account public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return &Key{priv: priv, kid: b64.EncodeToString(sum[:])}, nil
}

var b64 = base64.RawURLEncoding

type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid,omitempty"`
	Typ string `json:"typ,omitempty"`
}

// Sign encodes c as a compact JWS.
func (k *Key) Sign(c Claims) (string, error) {
	h, err := json.Marshal(header{Alg: "ES256", Kid: k.kid, Typ: "JWT"})
	if err != nil {
		return "", err
	}
	p, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode claims: %w", err)
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(p)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, k.priv, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	// JWS ES256 is r||s, each left-padded to 32 bytes (RFC 7518 3.4),
	// not the ASN.1 form crypto/ecdsa's SignASN1 makes.
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + b64.EncodeToString(sig), nil
}

// LooksLikeJWT tells a JWT from an opaque token without verifying it, so
// that a token file's entries are never parsed as JWTs.
func LooksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2
}

// Verify checks the signature, the issuer, that one audience is among
// audiences, and that now is within [nbf, exp). Errors wrap ErrInvalid.
func (k *Key) Verify(token, issuer string, audiences []string, now time.Time) (Claims, error) {
	var c Claims
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return c, fmt.Errorf("%w: not a compact JWS", ErrInvalid)
	}
	hb, err := b64.DecodeString(parts[0])
	if err != nil {
		return c, fmt.Errorf("%w: header: %v", ErrInvalid, err)
	}
	var h header
	if err := json.Unmarshal(hb, &h); err != nil {
		return c, fmt.Errorf("%w: header: %v", ErrInvalid, err)
	}
	// Only ES256: a token naming another algorithm ("none", HS256 with the
	// public key as secret) is refused before its signature is looked at.
	if h.Alg != "ES256" {
		return c, fmt.Errorf("%w: algorithm %q", ErrInvalid, h.Alg)
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return c, fmt.Errorf("%w: malformed signature", ErrInvalid)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	if !ecdsa.Verify(&k.priv.PublicKey, sum[:], r, s) {
		return c, fmt.Errorf("%w: bad signature", ErrInvalid)
	}
	pb, err := b64.DecodeString(parts[1])
	if err != nil {
		return c, fmt.Errorf("%w: payload: %v", ErrInvalid, err)
	}
	if err := json.Unmarshal(pb, &c); err != nil {
		return c, fmt.Errorf("%w: payload: %v", ErrInvalid, err)
	}
	switch t := now.Unix(); {
	case c.Issuer != issuer:
		return c, fmt.Errorf("%w: issuer %q", ErrInvalid, c.Issuer)
	case !slices.ContainsFunc(c.Audience, func(a string) bool { return slices.Contains(audiences, a) }):
		return c, fmt.Errorf("%w: audiences %q", ErrInvalid, c.Audience)
	case t >= c.Expiry:
		return c, fmt.Errorf("%w: expired at %s", ErrInvalid, time.Unix(c.Expiry, 0).UTC().Format(time.RFC3339))
	case t < c.NotBefore:
		return c, fmt.Errorf("%w: not valid before %s", ErrInvalid, time.Unix(c.NotBefore, 0).UTC().Format(time.RFC3339))
	}
	return c, nil
}
