package cluster_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/cluster"
	"github.com/nodenet/nodenet/internal/netnsutil"
)

// restartNode is `nodenet node restart` on the node of pods[0]: the node
// comes back with a new namespace, the same eth0 MAC and podCIDR; its
// pods run again in new sandboxes that other pods reach; its host-local
// store holds exactly its live pods' IPs (the old sandboxes' released);
// no old pod namespace is left; the other nodes still route its podCIDR
// to it. A name that is no node is refused and changes nothing.
func restartNode(t *testing.T, cs kubernetes.Interface, dir, bin, name string, pods []corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := pods[0].Spec.NodeName
	i := 0
	fmt.Sscanf(node, "node-%d", &i)
	nodeNS := cluster.NodeNetns(name, i)
	nsBefore, err := netnsutil.InodeOf(netnsutil.Path(nodeNS))
	if err != nil {
		t.Fatal(err)
	}
	mac := func() string {
		out, err := exec.Command("ip", "-n", nodeNS, "-br", "link", "show", "eth0").CombinedOutput()
		if err != nil {
			t.Fatalf("eth0 of %s: %v: %s", nodeNS, err, out)
		}
		return strings.Fields(string(out))[2]
	}
	macBefore := mac()
	nBefore, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var onNode []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == node {
			onNode = append(onNode, p)
		}
	}

	if out, err := exec.Command(bin, "node", "restart", "node-99", "--dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), `no node "node-99"`) {
		t.Errorf("restart of an unknown node: %v, %s; want a refusal naming it", err, out)
	}
	if ino, _ := netnsutil.InodeOf(netnsutil.Path(nodeNS)); ino != nsBefore {
		t.Fatalf("a refused restart replaced %s", nodeNS)
	}

	out, err := exec.Command(bin, "node", "restart", node, "--dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("nodenet node restart %s: %v\n%s", node, err, out)
	}
	t.Logf("%s", out)
	if ino, err := netnsutil.InodeOf(netnsutil.Path(nodeNS)); err != nil || ino == nsBefore {
		t.Errorf("%s after the restart: inode %v (before %v), %v: want a new namespace", nodeNS, ino, nsBefore, err)
	}
	if m := mac(); m != macBefore {
		t.Errorf("eth0 MAC %s after the restart, %s before", m, macBefore)
	}
	// The pods come back: the same number ready, each in the podCIDR.
	var live []corev1.Pod
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		all, err := cluster.WaitPodsReady(ctx, cs, "default", "app=echo", len(pods), 10*time.Second)
		live = live[:0]
		if err == nil {
			for _, p := range all {
				if p.Spec.NodeName == node {
					live = append(live, p)
				}
			}
			if len(live) == len(onNode) && reachable(ctx, bin, all, live) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods of %s not back and reachable within 2 min: %v", node, err)
		}
	}
	nAfter, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nAfter.Spec.PodCIDR != nBefore.Spec.PodCIDR {
		t.Errorf("podCIDR %s after the restart, %s before", nAfter.Spec.PodCIDR, nBefore.Spec.PodCIDR)
	}
	want := map[string]bool{}
	for _, p := range live {
		want[p.Status.PodIP] = true
	}
	// The old sandboxes' IPs are released once the pods have new ones.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		got := ipFiles(t, dir, node)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("host-local store of %s: %v; live pods' IPs %v", node, got, want)
			break
		}
	}
	podNS, _ := netnsutil.List(cluster.PodNetnsPrefix(name))
	liveNS := map[string]bool{}
	all, _ := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	for _, p := range all.Items {
		liveNS[p.Annotations["nodenet.io/netns"]] = true
	}
	for _, ns := range podNS {
		if !liveNS[ns] {
			t.Errorf("pod namespace %s of no live pod left after the restart", ns)
		}
	}
	for j := 1; j <= 3; j++ {
		if j == i {
			continue
		}
		out, err := exec.Command("ip", "-n", cluster.NodeNetns(name, j), "-4", "route", "show", "exact", nAfter.Spec.PodCIDR).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "via 172.30.0.") {
			t.Errorf("node-%d's route to %s after the restart: %q %v", j, nAfter.Spec.PodCIDR, out, err)
		}
	}
}

// reachable is whether a pod of another node reaches each of to.
func reachable(ctx context.Context, bin string, all, to []corev1.Pod) bool {
	var from *corev1.Pod
	for k := range all {
		if all[k].Spec.NodeName != to[0].Spec.NodeName {
			from = &all[k]
		}
	}
	if from == nil {
		return false
	}
	for _, p := range to {
		reply, err := cluster.Probe(ctx, bin, from, fmt.Sprintf("tcp://%s:%d", p.Status.PodIP, cluster.EchoTCPPort))
		if err != nil || !strings.HasPrefix(reply, p.Name+":") {
			return false
		}
	}
	return true
}
