package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"

	"github.com/nodenet/nodenet/daemonset/manifest"
)

// hostRoutingOutcomes are the outcomes of nodenet_host_routing_packets_total
// (routes/hostrouting) the benchmark reports the growth of on the
// client's and the server's nodes over each scenario's runs: whether pod
// traffic really took the programs' fast paths or went to the stack, and
// why. not_pods is left out: the node-to-node runs paired with pod → pod
// and the API traffic of kubectl count there.
var hostRoutingOutcomes = []string{"forwarded", "delivered", "switched", "nat", "not_fast", "no_route"}

var hostRoutingSample = regexp.MustCompile(`(?m)^nodenet_host_routing_packets_total\{outcome="([a-z_]+)"\} ([0-9.e+]+)$`)

// parseHostRoutingMetrics reads the outcomes' counts out of flanneld's
// /metrics page.
func parseHostRoutingMetrics(page string) (map[string]int, error) {
	m := hostRoutingSample.FindAllStringSubmatch(page, -1)
	if len(m) == 0 {
		return nil, fmt.Errorf("no nodenet_host_routing_packets_total samples in flanneld's /metrics (is --host-routing=ebpf on?)")
	}
	counts := map[string]int{}
	for _, s := range m {
		v, err := strconv.ParseFloat(s[2], 64)
		if err != nil {
			return nil, fmt.Errorf("nodenet_host_routing_packets_total{outcome=%q}: %w", s[1], err)
		}
		counts[s[1]] = int(v)
	}
	return counts, nil
}

// hostRoutingCounts reads a node's host routing counters from flanneld's
// metrics endpoint on the node's loopback (host network), through bash's
// /dev/tcp: the node image has no HTTP client.
func hostRoutingCounts(ctx context.Context, node string) (map[string]int, error) {
	get := fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%d && printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3`, manifest.FlanneldHealthPort)
	out, err := docker{bin: "docker"}.run(ctx, "exec", node, "bash", "-c", get)
	if err != nil {
		return nil, fmt.Errorf("%s: flanneld metrics: %w", node, err)
	}
	c, err := parseHostRoutingMetrics(out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", node, err)
	}
	return c, nil
}
