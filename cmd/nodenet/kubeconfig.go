package main

import (
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodenet/nodenet/internal/version"
)

// restConfig loads --kubeconfig, or the in-cluster config when it is empty
// (the DaemonSet case), like every Kubernetes component.
func restConfig(kubeconfig string, qps float32, burst int) (*rest.Config, error) {
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
	cfg.UserAgent = version.UserAgent(component())
	return cfg, nil
}

// nodeClient is the client of the node daemons (agent, flanneld, proxy):
// kube's default rate limits doubled, as kube-proxy's are.
func nodeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := restConfig(kubeconfig, 20, 40)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return c, nil
}

// component names the running daemon for its user agent: "nodenet-proxy",
// "nodenet-flanneld", ...
func component() string {
	if len(os.Args) > 1 {
		if _, ok := subcommands()[os.Args[1]]; ok {
			return "nodenet-" + os.Args[1]
		}
	}
	return "nodenet"
}
