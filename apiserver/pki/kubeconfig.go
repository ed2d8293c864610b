package pki

import (
	"encoding/base64"
	"fmt"
)

// Kubeconfig renders a kubeconfig for server (https URL) that trusts caPEM
// and authenticates with token. It is plain YAML so that this package does
// not drag client-go into binaries that only need certificates.
func Kubeconfig(server string, caPEM []byte, user, token string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: nodenet
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: nodenet
  context:
    cluster: nodenet
    user: %s
current-context: nodenet
`, server, base64.StdEncoding.EncodeToString(caPEM), user, token, user)
}
