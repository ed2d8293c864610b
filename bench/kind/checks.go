package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nodenet/nodenet/daemonset"
)

// Node names kind gives a cluster named clusterName.
const (
	cpNode      = clusterName + "-control-plane"
	workerNode  = clusterName + "-worker"
	worker2Node = clusterName + "-worker2"
	// A cluster of both data planes (-one-cluster) has two more.
	worker3Node = clusterName + "-worker3"
	worker4Node = clusterName + "-worker4"
)

// side is one data plane's share of a cluster: the two workers its pods
// run on, and how its check and bench objects are named so that two
// sides fit in one cluster.
type side struct {
	dp     string // nodenetName or upstreamName
	w1, w2 string
	// prefix starts the names of its pods and Services ("" for the side
	// of a cluster of one data plane).
	prefix string
	// portShift moves its Service's ports and NodePorts: a cluster has
	// one NodePort space.
	portShift int
	// outside: this side creates the control plane's host-network
	// client, which every side shares (the control plane runs no data
	// plane on a cluster of two).
	outside bool
}

// The sides of the two cluster layouts.
var (
	wholeCluster = side{w1: workerNode, w2: worker2Node, outside: true}
	nodenetHalf  = side{dp: nodenetName, w1: workerNode, w2: worker2Node, outside: true}
	upstreamHalf = side{dp: upstreamName, w1: worker3Node, w2: worker4Node, prefix: "up-", portShift: 10}
)

func (sd side) name(n string) string { return sd.prefix + n }

const checkNS = "nodenet-check"

// pod is a pod pinned to a node (nodeName: no scheduler decision, so the
// scenario is the one named), tolerating the control plane's taint.
func pod(ns, name, node, image string, hostNet bool, labels map[string]string, containers ...string) string {
	var lb strings.Builder
	for k, v := range labels {
		fmt.Fprintf(&lb, "\n    %s: %s", k, v)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels:
    pod: %s%s
spec:
  nodeName: %s
  hostNetwork: %t
  terminationGracePeriodSeconds: 1
  tolerations:
  - operator: Exists
  containers:%s
---
`, name, ns, name, lb.String(), node, hostNet, strings.Join(containers, ""))
}

// container is one container entry; image is in every one so pods can mix.
func container(name, image string, command ...string) string {
	q := make([]string, len(command))
	for i, c := range command {
		q[i] = fmt.Sprintf("%q", c)
	}
	return fmt.Sprintf(`
  - name: %s
    image: %s
    imagePullPolicy: Never
    command: [%s]`, name, image, strings.Join(q, ", "))
}

func namespace(name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n---\n", name)
}

// checkWorkload: echo servers on both of the side's workers, a client
// beside the first, a host-network client on the control plane (outside
// the pod network), and a NodePort Service in front of the second
// worker's server.
func checkWorkload(sd side) string {
	img := daemonset.DefaultImage
	echo := func(n string) string { return container("echo", img, daemonset.NodenetPath, "echo", "--name", n) }
	idle := container("idle", img, daemonset.NodenetPath, "echo", "--tcp", "", "--udp", "", "--http", "127.0.0.1:18080")
	m := namespace(checkNS) +
		pod(checkNS, sd.name("echo-a"), sd.w1, img, false, map[string]string{"app": sd.name("echo-a")}, echo(sd.name("echo-a"))) +
		pod(checkNS, sd.name("echo-b"), sd.w2, img, false, map[string]string{"app": sd.name("echo-b")}, echo(sd.name("echo-b"))) +
		pod(checkNS, sd.name("client"), sd.w1, img, false, nil, idle)
	if sd.outside {
		m += pod(checkNS, "outside", cpNode, img, true, nil, idle)
	}
	return m + fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  type: NodePort
  selector:
    app: %[2]s
  ports:
  - name: tcp
    port: 9000
    protocol: TCP
---
`, checkNS, sd.name("echo-b"))
}

// checkTraffic runs the traffic checks on a side's workers: pod→pod on
// one node and across, pod→ClusterIP, and a host outside the pod network
// → NodePort.
func (k *kcluster) checkTraffic(ctx context.Context, label string, sd side) error {
	return k.p.step(ctx, "traffic checks ("+label+")", func(ctx context.Context) error {
		ip := func(pod string) (string, error) {
			return k.kubectl(ctx, "-n", checkNS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}")
		}
		a, err := ip(sd.name("echo-a"))
		if err != nil {
			return err
		}
		b, err := ip(sd.name("echo-b"))
		if err != nil {
			return err
		}
		cip, err := k.kubectl(ctx, "-n", checkNS, "get", "svc", sd.name("echo-b"), "-o", "jsonpath={.spec.clusterIP}")
		if err != nil {
			return err
		}
		np, err := k.kubectl(ctx, "-n", checkNS, "get", "svc", sd.name("echo-b"), "-o", "jsonpath={.spec.ports[0].nodePort}")
		if err != nil {
			return err
		}
		nodes, err := k.nodes(ctx)
		if err != nil {
			return err
		}
		client, ea, eb := sd.name("client"), sd.name("echo-a"), sd.name("echo-b")
		checks := []struct{ name, from, target, want string }{
			{"pod → pod, same node", client, "tcp://" + a + ":9000", ea},
			{"pod → pod, across nodes", client, "tcp://" + b + ":9000", eb},
			{"pod → ClusterIP", client, "tcp://" + cip + ":9000", eb},
			{"outside → NodePort", "outside", "tcp://" + nodes[sd.w2] + ":" + np, eb},
			{"outside → NodePort on another node", "outside", "tcp://" + nodes[sd.w1] + ":" + np, eb},
		}
		var failed []string
		for _, c := range checks {
			out, err := k.kubectl(ctx, "-n", checkNS, "exec", c.from, "--", daemonset.NodenetPath, "echo", "--client", c.target, "--message", "check")
			if err != nil || !strings.Contains(out, c.want) {
				failed = append(failed, fmt.Sprintf("%s (%s): %q %v", c.name, c.target, out, err))
				k.p.note("FAIL %s → %s", c.name, c.target)
				continue
			}
			k.p.note("ok   %s → %s: %s", c.name, c.target, strings.TrimSpace(out))
		}
		if len(failed) > 0 {
			return fmt.Errorf("%d of %d checks failed: %s", len(failed), len(checks), strings.Join(failed, "; "))
		}
		return nil
	})
}

// switchProxy changes the proxy mode the way an operator would: the
// ConfigMap, then a rollout restart.
func (k *kcluster) switchProxy(ctx context.Context, mode string) error {
	return k.p.step(ctx, "switch proxy mode to "+mode+" (ConfigMap + rollout restart)", func(ctx context.Context) error {
		if _, err := k.kubectl(ctx, "-n", "nodenet-system", "patch", "configmap", "nodenet-config", "--type", "merge",
			"-p", fmt.Sprintf(`{"data":{"proxyMode":%q}}`, mode)); err != nil {
			return err
		}
		if _, err := k.kubectl(ctx, "-n", "nodenet-system", "rollout", "restart", "daemonset/nodenet"); err != nil {
			return err
		}
		_, err := k.kubectl(ctx, "-n", "nodenet-system", "rollout", "status", "daemonset/nodenet", "--timeout=300s")
		return err
	})
}
