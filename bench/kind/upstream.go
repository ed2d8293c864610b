package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/nodenet/nodenet/daemonset/image"
	"github.com/nodenet/nodenet/internal/upstream"
)

// The upstream data plane the benchmark compares nodenet with: flannel
// v0.28.10 (flanneld, deployed as upstream's kube-flannel.yml deploys it)
// and kube-proxy v1.37.2 (deployed by kubeadm's kube-proxy addon, as on
// any kubeadm cluster). Upstream's own CNI plugin (flannel-io/cni-plugin)
// is refused by the Go module proxy, so the flannel DaemonSet installs
// nodenet's flannel-compatible plugin as /opt/cni/bin/flannel under
// upstream's unchanged 10-flannel.conflist; pod set-up is therefore
// nodenet's code in both data planes, and pod → pod figures compare
// flanneld + kube-proxy, not the CNI plugin.
const (
	flannelNS       = "kube-flannel"
	flannelDS       = flannelNS + "/kube-flannel-ds"
	flannelImageRef = "nodenet/kind-flannel:" + upstream.FlanneldVersion
	kubeProxyRef    = "registry.k8s.io/kube-proxy:" + kubernetesVersion
	upstreamName    = "upstream" // data plane name prefix in results
	nodenetName     = "nodenet"  // the same, for nodenet's planes
)

// Paths in the flannel image: where upstream's images keep flanneld
// (flannel) and the CNI plugin (flannel-cni-plugin).
const (
	flanneldPath  = "/opt/bin/flanneld"
	flannelCNIBin = "/flannel"
)

// upstreamImages writes the flannel and kube-proxy image archives into
// dir, each built like nodenet's image: the same Debian userland layer
// (iptables, nftables; flanneld and kube-proxy exec them), and the
// binaries on top. The kube-proxy image replaces the one-binary image
// the node image carries under the same name, which has no iptables.
func upstreamImages(ctx context.Context, p *progress, repo, kubeProxy, dir string) ([]string, error) {
	flanneld, err := upstream.BuildFlanneld(func(format string, args ...any) { p.note(format, args...) })
	if err != nil {
		return nil, err
	}
	home, err := os.UserCacheDir()
	if err != nil {
		return nil, err
	}
	debs := filepath.Join(home, "nodenet", "debs") // the cache `make image` uses
	log := slog.New(slog.NewTextHandler(p.w, nil))
	// coreutils: upstream's init containers copy the plugin and the CNI
	// configuration with cp.
	flBase, flPkgs, err := image.UserlandLayer(ctx, debs, log, "coreutils")
	if err != nil {
		return nil, err
	}
	cni := filepath.Join(dir, "nodenet-cni")
	if err := goBuildRepo(ctx, repo, "./cmd/nodenet-cni", cni); err != nil {
		return nil, err
	}
	fl := image.NewLayer()
	for _, b := range []struct{ src, path string }{{flanneld, flanneldPath}, {cni, flannelCNIBin}} {
		data, err := os.ReadFile(b.src)
		if err != nil {
			return nil, err
		}
		if err := fl.Add(image.Entry{Path: strings.TrimPrefix(b.path, "/"), Mode: 0o755, Data: data}); err != nil {
			return nil, err
		}
	}
	kpBase, kpPkgs, err := image.UserlandLayer(ctx, debs, log, "conntrack")
	if err != nil {
		return nil, err
	}
	kp := image.NewLayer()
	kpBin, err := os.ReadFile(kubeProxy)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy binary: %w", err)
	}
	if err := kp.Add(image.Entry{Path: "usr/local/bin/kube-proxy", Mode: 0o755, Data: kpBin}); err != nil {
		return nil, err
	}
	var archives []string
	for _, img := range []struct {
		ref, file string
		layers    []*image.Layer
		comments  []string
		entry     []string
	}{
		{flannelImageRef, "flannel.tar", []*image.Layer{flBase, fl},
			[]string{"Debian userland: " + debNames(flPkgs), "flanneld " + upstream.FlanneldVersion + " (Go module proxy) and nodenet-cni as /flannel"},
			[]string{flanneldPath}},
		{kubeProxyRef, "kube-proxy.tar", []*image.Layer{kpBase, kp},
			[]string{"Debian userland: " + debNames(kpPkgs), "kube-proxy " + kubernetesVersion + " (Go module proxy)"},
			[]string{"/usr/local/bin/kube-proxy"}},
	} {
		out := filepath.Join(dir, img.file)
		if err := writeImage(out, image.Image{Ref: img.ref, Architecture: runtime.GOARCH, Layers: img.layers,
			LayerComments: img.comments,
			Config: image.Config{Entrypoint: img.entry, WorkingDir: "/",
				Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}}); err != nil {
			return nil, err
		}
		archives = append(archives, out)
	}
	return archives, nil
}

func debNames(pkgs []image.DebPackage) string {
	names := make([]string, len(pkgs))
	for i, p := range pkgs {
		names[i] = p.Name + "=" + p.Version
	}
	return strings.Join(names, " ")
}

// flannelNetConf is kube-flannel.yml's net-conf.json for a backend.
func flannelNetConf(backend string) string {
	return fmt.Sprintf(`{"Network": %q, "EnableNFTables": false, "Backend": {"Type": %q}}`, podSubnet, backend)
}

// flannelCNIConf is kube-flannel.yml's cni-conf.json, unchanged.
const flannelCNIConf = `{"name": "cbr0", "cniVersion": "0.3.1", "plugins": [{"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}}, {"type": "portmap", "capabilities": {"portMappings": true}}]}`

// flannelManifest is upstream's kube-flannel.yml (v0.28) as this cluster
// runs it: the same objects, RBAC, ConfigMap, init containers, command
// line and capabilities, with this cluster's images (never pulled) and
// one addition: KUBERNETES_SERVICE_HOST/PORT name the API server's
// address, as for nodenet's daemons, because the nodes' blackhole route
// for the Service network (nodenet-node-init) makes the in-cluster
// address unreachable from the host network before a Service proxy runs.
//
// On a cluster of both data planes, sd names the side whose nodes it runs
// on (a nodeSelector on the plane label); nil runs it everywhere.
func flannelManifest(backend, apiHost, apiPort string, sd *side) string {
	indent := func(s string) string { return "    " + s }
	selector := ""
	if sd != nil {
		selector = fmt.Sprintf("\n      nodeSelector: {%s: %s}", planeLabel, sd.dp)
	}
	return namespace(flannelNS) + fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: flannel
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [nodes/status]
  verbs: [patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: flannel
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: flannel
subjects:
- kind: ServiceAccount
  name: flannel
  namespace: %[1]s
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: flannel
  namespace: %[1]s
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: kube-flannel-cfg
  namespace: %[1]s
  labels: {tier: node, k8s-app: flannel, app: flannel}
data:
  cni-conf.json: |
%[2]s
  net-conf.json: |
%[3]s
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-flannel-ds
  namespace: %[1]s
  labels: {tier: node, k8s-app: flannel, app: flannel}
spec:
  selector:
    matchLabels: {app: flannel}
  template:
    metadata:
      labels: {tier: node, app: flannel}
    spec:
      hostNetwork: true
      priorityClassName: system-node-critical
      tolerations:
      - {operator: Exists, effect: NoSchedule}
      serviceAccountName: flannel%[9]s
      initContainers:
      - name: install-cni-plugin
        image: %[4]s
        imagePullPolicy: Never
        command: [cp]
        args: [-f, %[5]s, /opt/cni/bin/flannel]
        volumeMounts:
        - {name: cni-plugin, mountPath: /opt/cni/bin}
      - name: install-cni
        image: %[4]s
        imagePullPolicy: Never
        command: [cp]
        args: [-f, /etc/kube-flannel/cni-conf.json, /etc/cni/net.d/10-flannel.conflist]
        volumeMounts:
        - {name: cni, mountPath: /etc/cni/net.d}
        - {name: flannel-cfg, mountPath: /etc/kube-flannel/}
      containers:
      - name: kube-flannel
        image: %[4]s
        imagePullPolicy: Never
        command: [%[6]s]
        args: [--ip-masq, --kube-subnet-mgr]
        resources:
          requests: {cpu: 100m, memory: 50Mi}
        securityContext:
          privileged: false
          capabilities:
            add: [NET_ADMIN, NET_RAW]
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        - {name: EVENT_QUEUE_DEPTH, value: "5000"}
        - {name: CONT_WHEN_CACHE_NOT_READY, value: "false"}
        - {name: KUBERNETES_SERVICE_HOST, value: %[7]q}
        - {name: KUBERNETES_SERVICE_PORT, value: %[8]q}
        volumeMounts:
        - {name: run, mountPath: /run/flannel}
        - {name: flannel-cfg, mountPath: /etc/kube-flannel/}
        - {name: xtables-lock, mountPath: /run/xtables.lock}
      volumes:
      - {name: run, hostPath: {path: /run/flannel}}
      - {name: cni-plugin, hostPath: {path: /opt/cni/bin}}
      - {name: cni, hostPath: {path: /etc/cni/net.d}}
      - {name: flannel-cfg, configMap: {name: kube-flannel-cfg}}
      - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
---
`, flannelNS, indent(flannelCNIConf), indent(flannelNetConf(backend)), flannelImageRef, flannelCNIBin, flanneldPath, apiHost, apiPort, selector)
}

// deployUpstream loads the upstream images (and nodenet's, which the
// check workload runs) into the cluster kubeadm made with kube-proxy,
// restarts kube-proxy on the image that carries its userland, and applies
// the flannel manifest; on a side's nodes only if sd is set (kube-proxy's
// DaemonSet was confined to them by then: confineKubeProxy).
func (k *kcluster) deployUpstream(ctx context.Context, repo, backend string, sd *side) error {
	dir := filepath.Join(k.c.root, "upstream-images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var archives []string
	if err := k.p.step(ctx, "upstream images (flannel "+upstream.FlanneldVersion+" + nodenet-cni, kube-proxy "+kubernetesVersion+")", func(ctx context.Context) error {
		var err error
		archives, err = upstreamImages(ctx, k.p, repo, filepath.Join(k.b.kubernetes, "kube-proxy"), dir)
		return err
	}); err != nil {
		return err
	}
	// nodenet's image too: not for the data plane, for the check
	// workload's echo pods (nodenet echo), the same in both data planes.
	// On a cluster of both (sd set), deployNodenet loaded it already.
	if sd == nil {
		archives = append(archives, filepath.Join(repo, "bin", "nodenet-image.tar"))
	}
	for _, a := range archives {
		if err := k.load(ctx, a); err != nil {
			return err
		}
	}
	if err := k.p.step(ctx, "kube-proxy onto the loaded image (rollout restart)", func(ctx context.Context) error {
		if _, err := k.kubectl(ctx, "-n", "kube-system", "rollout", "restart", "daemonset/kube-proxy"); err != nil {
			return err
		}
		_, err := k.kubectl(ctx, "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=300s")
		return err
	}); err != nil {
		return err
	}
	if err := k.p.step(ctx, "kubectl apply kube-flannel ("+backend+")", func(ctx context.Context) error {
		nodes, err := k.nodes(ctx)
		if err != nil || nodes[cpNode] == "" {
			return fmt.Errorf("control-plane address: %v", err)
		}
		return k.apply(ctx, flannelManifest(backend, nodes[cpNode], "6443", sd))
	}); err != nil {
		return err
	}
	return k.waitReady(ctx, flannelDS, sd)
}

var kubeProxyModeLine = regexp.MustCompile(`(?m)^mode: .*$`)

// kubeProxyConfig sets the mode in kubeadm's KubeProxyConfiguration text.
func kubeProxyConfig(conf, mode string) (string, error) {
	if !kubeProxyModeLine.MatchString(conf) {
		return "", fmt.Errorf("kube-proxy's config.conf has no mode line")
	}
	return kubeProxyModeLine.ReplaceAllString(conf, "mode: "+mode), nil
}

// switchKubeProxy changes kube-proxy's mode as an operator of a kubeadm
// cluster would (the kube-proxy ConfigMap, a rollout restart), then makes
// sure the other mode's rules are gone from the nodes (kube-proxy cleans
// them up when it starts), so the figures are the new mode's alone.
func (k *kcluster) switchKubeProxy(ctx context.Context, mode string) error {
	return k.p.step(ctx, "switch kube-proxy to "+mode+" (ConfigMap + rollout restart)", func(ctx context.Context) error {
		conf, err := k.kubectl(ctx, "-n", "kube-system", "get", "configmap", "kube-proxy", "-o", `jsonpath={.data.config\.conf}`)
		if err != nil {
			return err
		}
		conf, err = kubeProxyConfig(conf, mode)
		if err != nil {
			return err
		}
		patch, err := json.Marshal(map[string]any{"data": map[string]string{"config.conf": conf}})
		if err != nil {
			return err
		}
		if _, err := k.kubectl(ctx, "-n", "kube-system", "patch", "configmap", "kube-proxy", "--type", "merge", "-p", string(patch)); err != nil {
			return err
		}
		if _, err := k.kubectl(ctx, "-n", "kube-system", "rollout", "restart", "daemonset/kube-proxy"); err != nil {
			return err
		}
		if _, err := k.kubectl(ctx, "-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=300s"); err != nil {
			return err
		}
		// kube-proxy removes the other mode's rules once it runs, not
		// before its pod is ready: give it a minute.
		deadline := time.Now().Add(time.Minute)
		for {
			err := k.kubeProxyLeftovers(ctx, mode)
			if err == nil || time.Now().After(deadline) {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * time.Second):
			}
		}
	})
}

// kubeProxyLeftovers fails when a node still holds rules of the kube-proxy
// mode other than mode.
func (k *kcluster) kubeProxyLeftovers(ctx context.Context, mode string) error {
	d := docker{bin: "docker"}
	probe := "iptables-save -t nat | grep -c '^-A KUBE-SERVICES' || true"
	if mode == "iptables" {
		probe = "nft list table ip kube-proxy >/dev/null 2>&1 && echo 1 || echo 0"
	}
	nodes := []string{cpNode, workerNode, worker2Node}
	if k.oneCluster {
		nodes = []string{upstreamHalf.w1, upstreamHalf.w2}
	}
	for _, node := range nodes {
		out, err := d.run(ctx, "exec", node, "sh", "-c", probe)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "0" {
			return fmt.Errorf("node %s still holds kube-proxy rules of the other mode after switching to %s (%s → %s)", node, mode, probe, out)
		}
	}
	return nil
}
