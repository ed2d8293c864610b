package node

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/testapi"
)

// A node that rebooted: the agent and the pod's processes are gone, so is
// the pod's namespace, but the agent's state and the host-local store are
// on disk. The restarted agent gives the pod a new sandbox and releases
// the old one's IP: the store holds exactly the pod's current address.
// Without the release the old reservation stayed for good (its container
// ID is never used again, and the GC kept it as a live pod's).
func TestRebootedNodeReleasesTheOldSandboxIP(t *testing.T) {
	n := startNode(t)
	n.runPod(t, "web", []string{"sleep", "3600"}, corev1.RestartPolicyAlways)
	running := func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" }
	before := n.waitPod(t, "web", "running with an IP", running)
	store := filepath.Join(filepath.Dir(n.hostRoot), "ipam")
	if got := reservations(t, store); len(got) != 1 || got[0] != before.Status.PodIP {
		t.Fatalf("store before the reboot: %v, want [%s]", got, before.Status.PodIP)
	}
	var s sandboxState
	b, err := os.ReadFile(filepath.Join(n.stateDir, string(before.UID)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}

	// The reboot: the agent and the container die, the namespace goes.
	n.stopAgent(syscall.SIGKILL)
	for _, pid := range s.PIDs {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := netnsutil.Delete(s.Netns); err != nil {
		t.Fatal(err)
	}
	n.startAgent(t)

	// The new sandbox is recorded under a new container ID; the pod then
	// reports its IP.
	var rec sandboxState
	testapi.Eventually(t, 60*time.Second, "a new sandbox recorded", func() bool {
		b, err := os.ReadFile(filepath.Join(n.stateDir, string(before.UID)+".json"))
		return err == nil && json.Unmarshal(b, &rec) == nil && rec.ContainerID != s.ContainerID && len(rec.IPs) == 1 && netnsExists(rec.Netns)
	})
	n.waitPod(t, "web", "running with the new sandbox's IP "+rec.IPs[0], func(p *corev1.Pod) bool {
		return running(p) && p.Status.PodIP == rec.IPs[0]
	})
	testapi.Eventually(t, 30*time.Second, "the store holding only the new sandbox's IP "+rec.IPs[0], func() bool {
		got := reservations(t, store)
		return len(got) == 1 && got[0] == rec.IPs[0]
	})
}

// reservations lists the addresses reserved under a host-local data dir.
func reservations(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, perr := netip.ParseAddr(d.Name()); !d.IsDir() && perr == nil {
			out = append(out, d.Name())
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// The node lifecycle controller sets the pods of a node that went silent
// not ready; when the node is back, the agent writes its own view again
// (as the kubelet's status manager reconciles), so the pods return to
// their Services. The agent had only compared with what it posted last,
// so such pods stayed not ready for good.
func TestPodReadinessWrittenBackAfterAnotherWriter(t *testing.T) {
	n := startNode(t)
	ctx := testapi.Context(t)
	n.runPod(t, "web", []string{"sleep", "3600"}, corev1.RestartPolicyAlways)
	ready := func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && conditionStatus(p.Status, corev1.PodReady) == corev1.ConditionTrue
	}
	p := n.waitPod(t, "web", "Ready", ready)
	// What controllers/nodelifecycle does to a silent node's pods.
	for k, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			p.Status.Conditions[k].Status, p.Status.Conditions[k].Reason = corev1.ConditionFalse, "NodeNotReady"
		}
	}
	if _, err := n.client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitPod(t, "web", "Ready again, written back by the agent", ready)
}
