package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodenet/nodenet/internal/atomicfile"
)

// Each component of the local cluster has its own identity in the API
// server's token file, as each kubelet and control-plane component has
// its own credentials on a real cluster: the admin (system:masters), the
// controller manager (system:masters as well: it writes every kind the
// controllers own) and one node identity per node (system:node:<name> in
// system:nodes), which the API server's node authorizer holds to its own
// Node, Lease and pods. The DaemonSet's flanneld and proxy run with their
// service accounts' tokens and the manifest's RBAC, as on any cluster.

// tokenFile is where up writes the API server's token file.
func (c *Cluster) tokenFile() string { return filepath.Join(c.cfg.Dir, "tokens.csv") }

// NodeKubeconfig is node i's own kubeconfig (its agent's credentials), in
// the node's root as a kubelet's is on a machine.
func (c *Cluster) NodeKubeconfig(i int) string {
	return filepath.Join(c.nodeDir(i), "etc/nodenet/kubelet.kubeconfig")
}

// identity is one line of the token file.
type identity struct {
	token, user string
	groups      []string
	node        int // the node's index for a node identity, else 0
}

// newIdentities draws fresh tokens for every identity of a cluster of n
// nodes; the first is the admin's (the API server writes its kubeconfig
// for the user named "admin").
func newIdentities(nodes int) ([]identity, error) {
	ids := []identity{
		{user: "admin", groups: []string{"system:masters"}},
		{user: "system:kube-controller-manager", groups: []string{"system:masters"}},
	}
	for i := 1; i <= nodes; i++ {
		ids = append(ids, identity{user: "system:node:" + NodeName(i), groups: []string{"system:nodes"}, node: i})
	}
	for i := range ids {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("draw a token: %w", err)
		}
		ids[i].token = hex.EncodeToString(b)
	}
	return ids, nil
}

// writeTokenFile writes ids in kube's token file format
// (token,user,uid,"group1,group2").
func writeTokenFile(path string, ids []identity) error {
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s,%s,%s,%q\n", id.token, id.user, id.user, strings.Join(id.groups, ","))
	}
	return atomicfile.Write(path, []byte(b.String()), 0o600)
}

// writeKubeconfig writes template (the API server's admin kubeconfig,
// already pointed at the right address) with token as the only user.
func writeKubeconfig(template *clientcmdapi.Config, token, user, path string) error {
	kc := template.DeepCopy()
	kc.AuthInfos = map[string]*clientcmdapi.AuthInfo{user: {Token: token}}
	for _, ctx := range kc.Contexts {
		ctx.AuthInfo = user
	}
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("encode kubeconfig for %s: %w", user, err)
	}
	return atomicfile.Write(path, b, 0o600)
}
