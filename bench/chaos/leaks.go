package main

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/cluster"
	"github.com/nodenet/nodenet/internal/netnsutil"
)

// netnsAnnotation is where the agent records a pod's namespace.
const netnsAnnotation = "nodenet.io/netns"

// Leak is one check of the end-of-suite audit: what was found that no
// live pod or node accounts for.
type Leak struct {
	What  string
	Found []string
}

// audit compares what the nodes hold with the live pods and nodes:
// host-local reservations, pod namespaces, veths, routes to pod CIDRs,
// and duplicate pod IPs.
func audit(ctx context.Context, e *env, dir string) ([]Leak, error) {
	pods, err := e.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	nodes, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	ipsOn := map[string]map[string]bool{}
	netnses := map[string]bool{}
	owner := map[string]string{}
	var dups []string
	for _, p := range pods.Items {
		if p.Spec.HostNetwork || p.Status.PodIP == "" {
			if ns := p.Annotations[netnsAnnotation]; ns != "" {
				netnses[ns] = true
			}
			continue
		}
		if ipsOn[p.Spec.NodeName] == nil {
			ipsOn[p.Spec.NodeName] = map[string]bool{}
		}
		ipsOn[p.Spec.NodeName][p.Status.PodIP] = true
		netnses[p.Annotations[netnsAnnotation]] = true
		if o, ok := owner[p.Status.PodIP]; ok {
			dups = append(dups, fmt.Sprintf("%s: %s and %s/%s", p.Status.PodIP, o, p.Namespace, p.Name))
		}
		owner[p.Status.PodIP] = p.Namespace + "/" + p.Name
	}
	leaks := []Leak{{What: "duplicate pod IPs", Found: dups}}

	var ips, veths, routes, rules []string
	cidrs := map[string]bool{}
	for _, n := range nodes.Items {
		cidrs[n.Spec.PodCIDR] = true
	}
	for i, n := range e.nodes {
		store := filepath.Join(dir, "nodes", n.Name, "var", "lib", "cni", "networks", "cbr0")
		ents, err := os.ReadDir(store)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		for _, ent := range ents {
			if _, err := netip.ParseAddr(ent.Name()); err == nil && !ipsOn[n.Name][ent.Name()] {
				b, _ := os.ReadFile(filepath.Join(store, ent.Name()))
				ips = append(ips, fmt.Sprintf("%s %s (%s)", n.Name, ent.Name(), strings.Fields(string(b) + " ?")[0]))
			}
		}
		ns := e.nodeNetns(i + 1)
		// The pods' host ends are the bridge's ports (the node's own eth0
		// is a veth too, to the vpc bridge).
		out, err := run(ctx, "ip", "-n", ns, "-o", "link", "show", "master", "cni0", "type", "veth")
		if err != nil {
			return nil, err
		}
		if got, want := strings.Count(out, "\n"), len(ipsOn[n.Name]); got != want {
			veths = append(veths, fmt.Sprintf("%s: %d veths for %d pods", n.Name, got, want))
		}
		out, err = run(ctx, "ip", "-n", ns, "-4", "route", "show", "root", cluster.ClusterCIDR)
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if dst := strings.Fields(l); len(dst) > 0 && !cidrs[dst[0]] {
				routes = append(routes, n.Name+": "+l)
			}
		}
		for _, ip := range dnatTargets(ctx, ns) {
			if owner[ip] == "" {
				rules = append(rules, n.Name+": DNAT to "+ip)
			}
		}
	}
	live, err := netnsutil.List(cluster.PodNetnsPrefix(e.name))
	if err != nil {
		return nil, err
	}
	var stray []string
	for _, ns := range live {
		if !netnses[ns] {
			stray = append(stray, ns)
		}
	}
	slices.Sort(stray)
	return append(leaks,
		Leak{What: "leaked IPs (host-local store vs live pods)", Found: ips},
		Leak{What: "leaked veths", Found: veths},
		Leak{What: "leaked pod network namespaces", Found: stray},
		Leak{What: "stale routes to pod CIDRs", Found: routes},
		Leak{What: "stale DNAT rules to pod IPs (iptables and nftables)", Found: rules},
	), nil
}

// dnatTarget is a DNAT destination in iptables-save or nft output.
var dnatTarget = regexp.MustCompile(`(?:--to-destination|dnat (?:ip )?to) (10\.244\.[0-9]+\.[0-9]+)`)

// dnatTargets are the pod-network addresses the rules in netns DNAT to
// (the proxy's endpoints, portmap's hostPorts), from every iptables
// backend and nftables; a tool that is missing contributes nothing.
func dnatTargets(ctx context.Context, netns string) []string {
	seen := map[string]bool{}
	for _, argv := range [][]string{{"iptables-save"}, {"iptables-legacy-save"}, {"nft", "list", "ruleset"}} {
		out, err := run(ctx, "ip", append([]string{"netns", "exec", netns}, argv...)...)
		if err != nil {
			continue
		}
		for _, m := range dnatTarget.FindAllStringSubmatch(out, -1) {
			seen[m[1]] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
