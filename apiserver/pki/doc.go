// Package pki creates what a secure API server needs on first start — a CA,
// a serving certificate signed by it, an admin bearer token — and writes the
// admin kubeconfig. Everything lands in the data dir and is reused after a
// restart, so clients keep trusting the server.
package pki
