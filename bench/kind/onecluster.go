package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodenet/nodenet/bench/kind/report"
	"github.com/nodenet/nodenet/daemonset"
)

// Both data planes on one cluster (bench -one-cluster).
//
// Measured on clusters of their own, one after the other, nodenet's and
// upstream's planes were tens of minutes apart, and a shared 2-CPU
// machine is not the same machine from one half hour to the next: the
// ninth run's misses of "nodenet ≥ upstream" were mostly of that size
// (nodenet's own planes differed by up to 16 % on a path none of them
// changes). Here one cluster of four workers carries both: nodenet's
// DaemonSet on the first two (its manifest's --node-selector), upstream
// flannel and kube-proxy on the other two (nodeSelectors on their
// DaemonSets), the control plane running neither, as the outside client
// of both NodePort scenarios. Each side has the same pods and scenarios
// on its own pair of workers, and every run of a figure on one side is
// followed by the same figure's run on the other.
//
// The two sides see each other only as peers: each flanneld routes to
// the other side's podCIDRs from the node annotations both write in
// flannel's format, and each proxy programs the other side's Services
// too, so both carry the same rules. No figure crosses sides.

// planeLabel is the node label that puts a node on a side.
const planeLabel = "bench.nodenet.io/plane"

// besideMode is the kube-proxy mode measured beside nodenet's mode m:
// the same, or for a mode kube-proxy lacks (ebpf, ipvs), iptables,
// kube-proxy's default, if asked for, else the first asked for.
func besideMode(m string, upstreamModes []string) string {
	switch {
	case slices.Contains(upstreamModes, m):
		return m
	case slices.Contains(upstreamModes, "iptables"):
		return "iptables"
	}
	return upstreamModes[0]
}

// bringUpOneCluster creates a fresh cluster of both data planes: nodenet
// in the first runnable mode of modes, kube-proxy in kubeProxyMode, and
// both sides' check workloads. It returns the runnable modes and a note
// for each one skipped.
func (k *kcluster) bringUpOneCluster(ctx context.Context, repo, backend string, modes []string, kubeProxyMode string) ([]string, []string, error) {
	if err := deleteCluster(ctx, k.p, k.c, k.b.kind); err != nil {
		return nil, nil, err
	}
	if err := k.create(ctx, kubeProxyMode, 4); err != nil {
		return nil, nil, err
	}
	if err := k.p.step(ctx, "label the sides' nodes, confine kube-proxy to upstream's", func(ctx context.Context) error {
		for _, sd := range []side{nodenetHalf, upstreamHalf} {
			if _, err := k.kubectl(ctx, "label", "node", sd.w1, sd.w2, planeLabel+"="+sd.dp, "--overwrite"); err != nil {
				return err
			}
		}
		return k.confineKubeProxy(ctx)
	}); err != nil {
		return nil, nil, err
	}
	modes, notes, err := k.runnableModes(ctx, backend, modes)
	if err != nil {
		return nil, notes, err
	}
	if err := k.deployNodenet(ctx, repo, backend, modes[0], &nodenetHalf); err != nil {
		return nil, nil, err
	}
	if err := k.deployUpstream(ctx, repo, backend, &upstreamHalf); err != nil {
		return nil, nil, err
	}
	if err := k.p.step(ctx, "no kube-proxy rules outside upstream's side", func(ctx context.Context) error {
		return k.noKubeProxyRules(ctx, cpNode, nodenetHalf.w1, nodenetHalf.w2)
	}); err != nil {
		return nil, nil, err
	}
	if err := k.p.step(ctx, "check workloads of both sides (echo pods, NodePort Services)", func(ctx context.Context) error {
		if err := k.apply(ctx, checkWorkload(nodenetHalf)+checkWorkload(upstreamHalf)); err != nil {
			return err
		}
		return k.waitPods(ctx, checkNS, "pod")
	}); err != nil {
		return nil, nil, err
	}
	if err := k.checkAcrossSides(ctx); err != nil {
		return nil, nil, err
	}
	return modes, notes, nil
}

// checkAcrossSides: a pod on each side reaches a pod on the other, which
// only works if each side's flanneld routes to the other's podCIDRs from
// the node annotations both write in flannel's format.
func (k *kcluster) checkAcrossSides(ctx context.Context) error {
	return k.p.step(ctx, "traffic checks across the sides (nodenet ⇄ upstream flannel)", func(ctx context.Context) error {
		for _, c := range []struct{ from, to side }{{nodenetHalf, upstreamHalf}, {upstreamHalf, nodenetHalf}} {
			ip, err := k.kubectl(ctx, "-n", checkNS, "get", "pod", c.to.name("echo-b"), "-o", "jsonpath={.status.podIP}")
			if err != nil {
				return err
			}
			out, err := k.kubectl(ctx, "-n", checkNS, "exec", c.from.name("client"), "--", daemonset.NodenetPath, "echo", "--client", "tcp://"+ip+":9000", "--message", "check")
			if err != nil || !strings.Contains(out, c.to.name("echo-b")) {
				return fmt.Errorf("%s's client → %s's echo-b (%s): %q %v", c.from.dp, c.to.dp, ip, out, err)
			}
			k.p.note("ok   %s pod → %s pod: %s", c.from.dp, c.to.dp, strings.TrimSpace(out))
		}
		return nil
	})
}

// confineKubeProxy puts a nodeSelector for upstream's side on kubeadm's
// kube-proxy DaemonSet and waits until no kube-proxy pod is left on
// another node. Its pods until then ran on the image the node image
// carries, which has no iptables or nft to program with
// (upstreamImages); noKubeProxyRules checks that they left nothing.
func (k *kcluster) confineKubeProxy(ctx context.Context) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"nodeSelector": map[string]string{planeLabel: upstreamName}}}}})
	if err != nil {
		return err
	}
	if _, err := k.kubectl(ctx, "-n", "kube-system", "patch", "daemonset", "kube-proxy", "--type", "merge", "-p", string(patch)); err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := k.kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-proxy", "-o", "jsonpath={.items[*].spec.nodeName}")
		if err != nil {
			return err
		}
		var elsewhere []string
		for _, n := range strings.Fields(out) {
			if n != upstreamHalf.w1 && n != upstreamHalf.w2 {
				elsewhere = append(elsewhere, n)
			}
		}
		if len(elsewhere) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-proxy pods still on %v three minutes after its DaemonSet was confined to %s and %s", elsewhere, upstreamHalf.w1, upstreamHalf.w2)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// kubeProxyRulesProbe prints how many kube-proxy chains and tables a node
// holds: iptables chains only kube-proxy makes (the kubelet's own
// KUBE-KUBELET-CANARY and KUBE-FIREWALL are not counted), in any table
// of either family, and nftables tables named kube-proxy (nodenet's own
// are NODENET-* and nodenet).
const kubeProxyRulesProbe = `{ iptables-save; ip6tables-save; } 2>/dev/null | grep -cE '^:KUBE-(SERVICES|NODEPORTS|EXTERNAL-SERVICES|FORWARD|PROXY-|SVC-|SEP-|EXT-|FW-|SVL-)' || true; nft list tables 2>/dev/null | grep -c ' kube-proxy$' || true`

// noKubeProxyRules fails if any of nodes holds kube-proxy's chains or
// tables: on nodenet's side they would be a second proxy's rules in the
// path of nodenet's figures.
func (k *kcluster) noKubeProxyRules(ctx context.Context, nodes ...string) error {
	d := docker{bin: "docker"}
	for _, node := range nodes {
		out, err := d.run(ctx, "exec", node, "sh", "-c", kubeProxyRulesProbe)
		if err != nil {
			return fmt.Errorf("inspect %s for kube-proxy rules: %w", node, err)
		}
		if f := strings.Fields(out); len(f) != 2 || f[0] != "0" || f[1] != "0" {
			return fmt.Errorf("node %s holds kube-proxy rules (iptables chains, nft tables: %q); it is not on upstream's side", node, out)
		}
	}
	return nil
}

// benchOneCluster measures one backend with both data planes on one
// cluster: for each nodenet mode, that plane and kube-proxy's plane
// beside it (besideMode), alternated run by run; the node-to-node
// baseline on nodenet's side first, if asked. Results measured before a
// failure are kept in data.
func (k *kcluster) benchOneCluster(ctx context.Context, o options, repo, backend string, baseline bool, data *report.Data) error {
	kubeProxy := besideMode(o.modes[0], o.upstream)
	modes, notes, err := k.bringUpOneCluster(ctx, repo, backend, o.modes, kubeProxy)
	data.Notes = append(data.Notes, notes...)
	if err != nil {
		return err
	}
	if err := k.deployBench(ctx, "bench workloads of both sides (netserver + iperf3 pods, NodePort Services)", benchWorkload(nodenetHalf)+benchWorkload(upstreamHalf)); err != nil {
		return err
	}
	nPods, nBase, err := k.scenarios(ctx, nodenetHalf)
	if err != nil {
		return err
	}
	uPods, _, err := k.scenarios(ctx, upstreamHalf)
	if err != nil {
		return err
	}
	if baseline {
		if err := k.measureStep(ctx, o, report.Baseline, data, planeRuns{report.Baseline, nBase}); err != nil {
			return err
		}
	}
	for i, m := range modes {
		if i > 0 {
			if err := k.switchProxy(ctx, m); err != nil {
				return err
			}
		}
		if u := besideMode(m, o.upstream); u != kubeProxy {
			if err := k.switchKubeProxy(ctx, u); err != nil {
				return err
			}
			kubeProxy = u
		}
		np, up := planeName(nodenetName, backend, m), planeName(upstreamName, backend, kubeProxy)
		if err := k.checkTraffic(ctx, np, nodenetHalf); err != nil {
			return err
		}
		if err := k.checkTraffic(ctx, up, upstreamHalf); err != nil {
			return err
		}
		if err := k.measureStep(ctx, o, np+" alternated with "+up, data, planeRuns{np, nPods}, planeRuns{up, uPods}); err != nil {
			return err
		}
	}
	return nil
}
