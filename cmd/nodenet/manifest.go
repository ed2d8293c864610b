package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodenet/nodenet/daemonset/manifest"
	"github.com/nodenet/nodenet/flanneld"
	"github.com/nodenet/nodenet/internal/atomicfile"
	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/proxy/proxycmd"
)

// runManifest is `nodenet manifest`: daemonset/nodenet.yaml for the given
// options on stdout, or with --cleanup its uninstall counterpart.
func runManifest(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("manifest", flag.ContinueOnError)
	o := manifest.Defaults()
	fs.StringVar(&o.ProxyMode, "proxy-mode", o.ProxyMode, "the proxy's data plane: iptables, nftables, ipvs or ebpf (ConfigMap key proxyMode)")
	fs.StringVar(&o.HostRouting, "host-routing", flanneld.HostRoutingKernel, "flanneld's --host-routing: kernel, or ebpf (pod-to-pod between nodes forwarded by TCX programs, past netfilter)")
	fs.StringVar(&o.Backend, "backend", o.Backend, "flanneld backend: "+strings.Join(flanneld.Backends, ", ")+" (net-conf.json Backend.Type)")
	fs.Var(cli.NewCIDRsFlag(&o.ClusterCIDRs, cidrlist.DualStack), "cluster-cidr", "pod network(s), one per family, comma-separated")
	fs.Var(&proxycmd.NodePortFlag{Dst: &o.NodePortAddresses}, "nodeport-addresses", `CIDRs whose local addresses accept NodePorts, or "primary"; default all`)
	fs.StringVar(&o.Image, "image", o.Image, "the nodenet image (make image builds it)")
	fs.StringVar(&o.APIServer, "api-server", "", "HOST:PORT the daemons reach the API server at (needed where nodenet's proxy replaces kube-proxy: the kubernetes Service's ClusterIP needs a running proxy); default: in-cluster config")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the DaemonSet, its ServiceAccount and ConfigMap")
	nodeSelector := fs.String("node-selector", "", "key=value[,key=value]: run nodenet only on the nodes with these labels (the others keep their CNI and proxy, as while a cluster moves to nodenet node by node); default every node")
	cleanup := fs.Bool("cleanup", false, "print the uninstall manifest instead: a DaemonSet running `nodenet cleanup` on every node (apply it after deleting nodenet.yaml)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if *nodeSelector != "" {
		set, err := labels.ConvertSelectorToLabelsMap(*nodeSelector)
		if err != nil {
			return fmt.Errorf("--node-selector %q: %w", *nodeSelector, err)
		}
		o.NodeSelector = set
	}
	// A DaemonSet whose proxy cannot start is no use: only the modes
	// this build carries (the manifest package knows every defined one).
	if err := proxycmd.DefaultModes(slog.New(slog.DiscardHandler)).Check(o.ProxyMode); err != nil {
		return err
	}
	render := manifest.Render
	if *cleanup {
		render = manifest.RenderCleanup
	}
	out, err := render(o)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(out)
	return err
}

// runInstallCNI is `nodenet install-cni`, the DaemonSet's init container:
// it copies the CNI plugin binary into the host's CNI bin directory under
// each name, atomically (a kubelet may exec the old one meanwhile), and
// leaves identical copies alone.
func runInstallCNI(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("install-cni", flag.ContinueOnError)
	src := fs.String("source", "/usr/local/bin/nodenet-cni", "the CNI plugin binary")
	dir := fs.String("cni-bin-dir", "/opt/cni/bin", "the host's CNI plugin directory")
	var names cli.StringList
	fs.Var(&names, "names", "plugin names to install it as, comma-separated (default nodenet,flannel: conflists written for flannel keep working)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(names) == 0 {
		names = cli.StringList{"nodenet", "flannel"}
	}
	data, err := os.ReadFile(*src)
	if err != nil {
		return fmt.Errorf("--source: %w", err)
	}
	for _, n := range names {
		if n != filepath.Base(n) || n == "." || n == ".." {
			return fmt.Errorf("--names %q: a plugin name is a file name, not a path", n)
		}
		dst := filepath.Join(*dir, n)
		if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, data) {
			fmt.Printf("%s: up to date\n", dst)
			continue
		}
		if err := atomicfile.Write(dst, data, 0o755); err != nil {
			return fmt.Errorf("install %s: %w", dst, err)
		}
		fmt.Printf("%s: installed from %s\n", dst, *src)
	}
	return nil
}
