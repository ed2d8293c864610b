package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const clusterName = "nodenet"

// The cluster's networks (kind's defaults, stated so the node image's
// blackhole routes and nodenet's clusterCIDR agree with them).
const (
	podSubnet     = "10.244.0.0/16"
	serviceSubnet = "10.96.0.0/16"
)

// kindConfig is one control-plane and workers workers, without kind's CNI
// and, when kubeProxyMode is "", without kube-proxy; otherwise kubeadm
// deploys kube-proxy in that mode, as it does on any kubeadm cluster. No
// DNS addon (no CoreDNS image here). kubelet 1.37 refuses a cgroup v1
// host unless told.
func kindConfig(kubeProxyMode string, workers int) string {
	mode, skip := "none", "[preflight, addon/kube-proxy, addon/coredns]"
	if kubeProxyMode != "" {
		mode, skip = kubeProxyMode, "[preflight, addon/coredns]"
	}
	return fmt.Sprintf(`kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
  kubeProxyMode: %s
  podSubnet: %s
  serviceSubnet: %s
nodes:
- role: control-plane
%s
kubeadmConfigPatches:
- |
  kind: InitConfiguration
  skipPhases: %s
- |
  kind: KubeletConfiguration
  failCgroupV1: false
`, mode, podSubnet, serviceSubnet, strings.TrimSuffix(strings.Repeat("- role: worker\n", workers), "\n"), skip)
}

// kcluster is a running kind cluster and the tools that reach it.
type kcluster struct {
	p          *progress
	b          built
	c          cache
	wrapperBin string
	kubeconfig string
	// hostRouting is what nodenet's manifest passes to flanneld's
	// --host-routing.
	hostRouting string
	// oneCluster: the cluster carries both data planes, each on its side
	// (onecluster.go).
	oneCluster bool
}

func newCluster(p *progress, b built, c cache) (*kcluster, error) {
	w, err := installWrapper(c)
	if err != nil {
		return nil, err
	}
	return &kcluster{p: p, b: b, c: c, wrapperBin: w, kubeconfig: filepath.Join(c.root, "kubeconfig")}, nil
}

// kindCmd runs kind with the docker wrapper first on PATH and the
// overlayfs snapshotter (kind's entrypoint would pick fuse-overlayfs,
// which Debian's containerd lacks).
func (k *kcluster) kindCmd(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, k.b.kind, args...)
	cmd.Env = append(os.Environ(), "PATH="+k.wrapperBin+":"+os.Getenv("PATH"), "KIND_EXPERIMENTAL_CONTAINERD_SNAPSHOTTER=overlayfs")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kind %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (k *kcluster) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, k.b.kubectl, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func (k *kcluster) apply(ctx context.Context, manifest string) error {
	cmd := exec.CommandContext(ctx, k.b.kubectl, "--kubeconfig", k.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return nil
}

// create makes the cluster and waits for the API server (nodes stay
// NotReady until a CNI runs).
func (k *kcluster) create(ctx context.Context, kubeProxyMode string, workers int) error {
	return k.p.step(ctx, fmt.Sprintf("kind create cluster (1 control-plane, %d workers)", workers), func(ctx context.Context) error {
		cfg := filepath.Join(k.c.root, "kind-config.yaml")
		if err := os.WriteFile(cfg, []byte(kindConfig(kubeProxyMode, workers)), 0o644); err != nil {
			return err
		}
		return k.kindCmd(ctx, "create", "cluster", "--name", clusterName, "--image", k.b.nodeImage,
			"--config", cfg, "--kubeconfig", k.kubeconfig, "--wait", "0s")
	})
}

// load puts an image archive into every node's containerd.
func (k *kcluster) load(ctx context.Context, archive string) error {
	return k.p.step(ctx, "kind load image-archive "+filepath.Base(archive), func(ctx context.Context) error {
		return k.kindCmd(ctx, "load", "image-archive", archive, "--name", clusterName)
	})
}

// deleteCluster removes the cluster's containers, their volumes and the
// kind network. It is idempotent.
func deleteCluster(ctx context.Context, p *progress, c cache, kindBin string) error {
	return p.step(ctx, "delete kind cluster "+clusterName, func(ctx context.Context) error {
		d := docker{bin: "docker"}
		if kindBin != "" {
			cmd := exec.CommandContext(ctx, kindBin, "delete", "cluster", "--name", clusterName, "--kubeconfig", filepath.Join(c.root, "kubeconfig"))
			if out, err := cmd.CombinedOutput(); err != nil {
				p.note("kind delete: %v: %s", err, out)
			}
		}
		// Whatever kind left (or a build container): by label and name.
		ids, _ := d.run(ctx, "ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster="+clusterName)
		for _, id := range strings.Fields(ids) {
			if _, err := d.run(ctx, "rm", "-f", "-v", id); err != nil {
				return err
			}
		}
		d.run(ctx, "rm", "-f", "-v", "nodenet-kind-node-build")
		if out, err := d.run(ctx, "network", "ls", "-q", "--filter", "name=^kind$"); err == nil && out != "" {
			if _, err := d.run(ctx, "network", "rm", "kind"); err != nil {
				return err
			}
		}
		left, _ := d.run(ctx, "ps", "-aq", "--filter", "label=io.x-k8s.kind.cluster="+clusterName)
		if left != "" {
			return fmt.Errorf("containers left: %s", left)
		}
		return nil
	})
}

// waitReady waits until the DaemonSet ds has rolled out and the nodes it
// runs on are Ready: every node, or the side's if sd is set.
func (k *kcluster) waitReady(ctx context.Context, ds string, sd *side) error {
	return k.p.step(ctx, "wait for nodes Ready and "+ds+" rolled out", func(ctx context.Context) error {
		ns, name, _ := strings.Cut(ds, "/")
		if _, err := k.kubectl(ctx, "-n", ns, "rollout", "status", "daemonset/"+name, "--timeout=300s"); err != nil {
			return err
		}
		nodes := []string{"--all"}
		if sd != nil {
			nodes = []string{sd.w1, sd.w2}
		}
		_, err := k.kubectl(ctx, append([]string{"wait", "--for=condition=Ready", "node"}, append(nodes, "--timeout=300s")...)...)
		return err
	})
}

// nodes are the cluster's node names and internal IPs.
func (k *kcluster) nodes(ctx context.Context) (map[string]string, error) {
	out, err := k.kubectl(ctx, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}`)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			m[f[0]] = f[1]
		}
	}
	return m, nil
}

// waitPods waits for pods with a label to be Ready.
func (k *kcluster) waitPods(ctx context.Context, ns, selector string) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		_, err := k.kubectl(ctx, "-n", ns, "wait", "--for=condition=Ready", "pod", "-l", selector, "--timeout=60s")
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
