package node

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/cgroup2"
	"github.com/nodenet/nodenet/internal/testapi"
)

// TestPodCgroup: with --pod-cgroup (the local cluster's node cgroup) the
// agent creates the cgroup and every pod process starts in it, a
// pod-network pod's as a hostNetwork pod's, while the agent itself stays
// where it was started.
func TestPodCgroup(t *testing.T) {
	n := startNode(t)
	mnt, err := cgroup2.Mount()
	if err != nil {
		t.Fatal(err)
	}
	rel := "nodenet.slice/" + n.ns.Name() + "-" + n.name
	cg := filepath.Join(mnt, rel)
	// Cleanups run last-registered first: the pods go before their
	// cgroup (startNode's cleanup would only delete them after).
	t.Cleanup(func() {
		n.stopPods(t, n.ns.Name()+"-p")
		if err := cgroup2.Remove(cg); err != nil {
			t.Error(err)
		}
	})
	n.stopAgent(syscall.SIGTERM)
	n.agentArgs = append(n.agentArgs, "--pod-cgroup", cg)
	n.startAgent(t)
	if !cgroup2.IsCgroup2(cg) {
		// New creates it before anything else; give the process a moment.
		testapi.Eventually(t, 10*time.Second, "pod cgroup created", func() bool { return cgroup2.IsCgroup2(cg) })
	}
	script := sh("echo cgroup=$(grep '^0::' /proc/self/cgroup); exec sleep 3600")
	n.runPod(t, "in-pod-net", script, corev1.RestartPolicyAlways)
	hostPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "in-host-net", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: n.name, HostNetwork: true,
		Containers: []corev1.Container{{Name: "main", Image: "host", Command: script}}}}
	if _, err := n.client.CoreV1().Pods("default").Create(testapi.Context(t), hostPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"in-pod-net", "in-host-net"} {
		n.dumpOnFailure(t, "default", name)
		n.waitPod(t, name, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		want := "cgroup=0::/" + rel
		testapi.Eventually(t, 30*time.Second, name+" logs its cgroup", func() bool {
			logs, _ := filepath.Glob(filepath.Join(n.stateDir, "logs", "default_"+name+"_*", "main", "*.log"))
			for _, l := range logs {
				if b, _ := os.ReadFile(l); strings.Contains(string(b), "cgroup=") {
					if !strings.Contains(string(b), want+"\n") {
						t.Fatalf("%s: %s, want %s", name, strings.TrimSpace(string(b)), want)
					}
					return true
				}
			}
			return false
		})
	}
	procs, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	if pid := strconv.Itoa(n.agent.Process.Pid); slices.Contains(strings.Fields(string(procs)), pid) {
		t.Errorf("the agent (pid %s) is in the pod cgroup: %s", pid, procs)
	}
}
