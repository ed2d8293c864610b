package main

import (
	"context"
	"fmt"
	"strings"
)

// The ipvs proxy mode needs the kernel's IPVS (ip_vs), and a kind node
// has no kernel of its own: it is the host's, so the mode runs only where
// the host has ip_vs built in or loaded. The node cannot load it either
// (no module files in the image, and loading one would change the
// machine). ipvsCheck asks every node and returns the first reason the
// mode cannot run ("" when every node can).
func (k *kcluster) ipvsCheck(ctx context.Context) (string, error) {
	d := docker{bin: "docker"}
	for _, node := range []string{cpNode, workerNode, worker2Node} {
		out, err := d.run(ctx, "exec", node, "sh", "-c", "test -e /proc/net/ip_vs && echo yes || echo no")
		if err != nil {
			return "", fmt.Errorf("inspect %s for the ipvs mode: %w", node, err)
		}
		if why := ipvsBlocker(node, out); why != "" {
			return why, nil
		}
	}
	return "", nil
}

// ipvsBlocker judges one node's answer to "is /proc/net/ip_vs there".
func ipvsBlocker(node, answer string) string {
	if strings.TrimSpace(answer) == "yes" {
		return ""
	}
	return fmt.Sprintf("node %s: the kernel has no IPVS (/proc/net/ip_vs is missing; a kind node runs on the host's kernel, "+
		"which must have ip_vs built in or loaded)", node)
}
