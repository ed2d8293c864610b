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
)

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

// checkWorkload: echo servers on both workers, a client beside the first,
// a host-network client on the control plane (outside the pod network),
// and a NodePort Service in front of the second worker's server.
func checkWorkload() string {
	img := daemonset.DefaultImage
	echo := func(n string) string { return container("echo", img, daemonset.NodenetPath, "echo", "--name", n) }
	idle := container("idle", img, daemonset.NodenetPath, "echo", "--tcp", "", "--udp", "", "--http", "127.0.0.1:18080")
	return namespace(checkNS) +
		pod(checkNS, "echo-a", workerNode, img, false, map[string]string{"app": "echo-a"}, echo("echo-a")) +
		pod(checkNS, "echo-b", worker2Node, img, false, map[string]string{"app": "echo-b"}, echo("echo-b")) +
		pod(checkNS, "client", workerNode, img, false, nil, idle) +
		pod(checkNS, "outside", cpNode, img, true, nil, idle) +
		fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: echo-b
  namespace: %s
spec:
  type: NodePort
  selector:
    app: echo-b
  ports:
  - name: tcp
    port: 9000
    protocol: TCP
---
`, checkNS)
}

// checkTraffic runs the traffic checks: pod→pod on one node and across,
// pod→ClusterIP, and a host outside the pod network → NodePort.
func (k *kcluster) checkTraffic(ctx context.Context, label string) error {
	return k.p.step(ctx, "traffic checks ("+label+")", func(ctx context.Context) error {
		ip := func(pod string) (string, error) {
			return k.kubectl(ctx, "-n", checkNS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}")
		}
		a, err := ip("echo-a")
		if err != nil {
			return err
		}
		b, err := ip("echo-b")
		if err != nil {
			return err
		}
		cip, err := k.kubectl(ctx, "-n", checkNS, "get", "svc", "echo-b", "-o", "jsonpath={.spec.clusterIP}")
		if err != nil {
			return err
		}
		np, err := k.kubectl(ctx, "-n", checkNS, "get", "svc", "echo-b", "-o", "jsonpath={.spec.ports[0].nodePort}")
		if err != nil {
			return err
		}
		nodes, err := k.nodes(ctx)
		if err != nil {
			return err
		}
		checks := []struct{ name, from, target, want string }{
			{"pod → pod, same node", "client", "tcp://" + a + ":9000", "echo-a"},
			{"pod → pod, across nodes", "client", "tcp://" + b + ":9000", "echo-b"},
			{"pod → ClusterIP", "client", "tcp://" + cip + ":9000", "echo-b"},
			{"outside → NodePort", "outside", "tcp://" + nodes[worker2Node] + ":" + np, "echo-b"},
			{"outside → NodePort on another node", "outside", "tcp://" + nodes[workerNode] + ":" + np, "echo-b"},
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
