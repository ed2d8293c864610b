package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/proxy/proxycmd"
)

// subcommand parses its own flags and runs until ctx ends.
type subcommand struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

func subcommands() map[string]subcommand {
	return map[string]subcommand{
		"apiserver":          {"Kubernetes-compatible API server on etcd (embedded by default)", runAPIServer},
		"version":            {"print the version", runVersion},
		"controller-manager": {"node IPAM, EndpointSlices, LoadBalancer IPs, node lifecycle, scheduler, cloud routes", runControllerManager},
		"flanneld":           {"flannel-compatible node network daemon (host-gw, vxlan, alloc, ip-masq)", runFlanneld},
		"proxy":              {"kube-proxy peer: Services and EndpointSlices as iptables, nftables, ipvs or ebpf service tables (also the nodenet-proxy binary)", proxycmd.Run},
		"up":                 {"local multi-node cluster in network namespaces (foreground supervisor)", runUp},
		"down":               {"stop a local cluster's up and remove the cluster (idempotent)", runDown},
		"status":             {"nodes, podCIDRs, pods and services of a local cluster", runStatus},
		"node":               {"node restart NAME: restart one node of a running local cluster as a reboot would", runNode},
		"agent":              {"node agent: registers the node, runs pods through CNI", runAgent},
		"echo":               {"TCP/UDP/HTTP echo server reporting its pod name (or --client)", runEcho},
		"loadgen":            {"steady TCP/UDP load against echo servers, per-second JSON reports (the chaos suite's clients)", runLoadgen},
		"logshim":            {"runs one pod container, writing its output as CRI log lines (started by the agent)", runLogShim},
		"manifest":           {"prints daemonset/nodenet.yaml (the DaemonSet manifest) for the given options", runManifest},
		"install-cni":        {"copies the CNI plugin into the host's CNI bin directory (the DaemonSet's init container)", runInstallCNI},
		"cleanup":            {"removes everything nodenet put on this node: flanneld's and the CNI plugin's state, every proxy mode's rules", runCleanup},
	}
}

// usage lists the subcommands on w.
func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: nodenet <command> [flags]\n\ncommands:\n")
	cmds := subcommands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'nodenet <command> --help' for its flags.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stdout)
		return
	}
	cmd, ok := subcommands()[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "nodenet: unknown command %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	cli.RunCommand("nodenet "+os.Args[1], cmd.run, os.Args[2:])
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
