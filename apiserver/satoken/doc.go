// Package satoken issues and verifies the API server's service account
// tokens: JWTs signed with ES256 (ECDSA P-256, SHA-256) carrying
// kube-apiserver's claims (iss, sub, aud, exp, iat, nbf, jti and the
// "kubernetes.io" object naming the namespace, service account and bound
// pod). The signing key lives in one PEM file that LoadOrCreate makes on
// the first start and reuses after, so tokens survive a restart.
//
// It knows nothing of storage: whether the service account or pod a token
// names still exists is the API server's check (apiserver/tokens.go).
// The encoder and verifier are the few lines of RFC 7515/7519 that ES256
// needs, written on the standard library rather than pulling in a JOSE
// library for one algorithm.
package satoken
