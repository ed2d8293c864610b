package cli

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodenet/nodenet/internal/version"
)

// RestConfig loads --kubeconfig, or the in-cluster config when it is empty
// (the DaemonSet case), like every Kubernetes component; component names
// the daemon in the user agent ("nodenet-proxy").
func RestConfig(kubeconfig string, qps float32, burst int, component string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig not given and not running in a cluster: %w", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = version.UserAgent(component)
	return cfg, nil
}

// NodeClient is the client of the node daemons (agent, flanneld, proxy):
// kube's default rate limits doubled, as kube-proxy's are.
func NodeClient(kubeconfig, component string) (kubernetes.Interface, error) {
	cfg, err := RestConfig(kubeconfig, 20, 40, component)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return c, nil
}

// NodeName is this node's name: override (--hostname-override) if set,
// else $NODE_NAME (the DaemonSet's downward API), else the host name;
// lower-cased as the kubelet registers it.
func NodeName(override string) (string, error) {
	if override != "" {
		return strings.ToLower(override), nil
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("node name: %w", err)
	}
	return strings.ToLower(h), nil
}
