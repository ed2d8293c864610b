package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/internal/testapi"
)

// TestPreStopHook: a deleted pod's containers run their preStop hooks
// before SIGTERM, as the kubelet runs them: an exec hook runs to its end
// first; a sleep hook holds the SIGTERM back for its seconds; a failing
// hook is reported (FailedPreStopHook) and the container is stopped all
// the same; a hook that outlasts the grace period is cut short and the
// container still gets its SIGTERM, 2 s before SIGKILL.
func TestPreStopHook(t *testing.T) {
	n := startNode(t)
	ctx := testapi.Context(t)
	dir := t.TempDir()
	mark := func(name string) string { return filepath.Join(dir, name) }
	// Each container appends "term" to its file on SIGTERM and exits.
	onTerm := func(name string) []string {
		return sh(`trap 'echo term >> ` + mark(name) + `; exit 0' TERM; while :; do sleep 0.05; done`)
	}
	hookExec := func(script string) *corev1.Lifecycle {
		return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: sh(script)}}}
	}
	hookSleep := func(s int64) *corev1.Lifecycle {
		return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hooks", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: n.name, TerminationGracePeriodSeconds: ptr.To[int64](4),
		Containers: []corev1.Container{
			{Name: "exec", Image: "host", Command: onTerm("exec"), Lifecycle: hookExec("sleep 0.5; echo hook >> " + mark("exec"))},
			{Name: "sleep", Image: "host", Command: onTerm("sleep"), Lifecycle: hookSleep(2)},
			{Name: "failing", Image: "host", Command: onTerm("failing"), Lifecycle: hookExec("exit 3")},
			{Name: "outlasts", Image: "host", Command: onTerm("outlasts"), Lifecycle: hookSleep(60)},
			{Name: "none", Image: "host", Command: onTerm("none")},
		}}}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.dumpOnFailure(t, "default", "hooks")
	n.waitPod(t, "hooks", "running", func(p *corev1.Pod) bool {
		running := 0
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Running != nil {
				running++
			}
		}
		return running == len(pod.Spec.Containers)
	})
	// The traps are set before the loop starts; give sh a moment to get there.
	time.Sleep(300 * time.Millisecond)

	deleted := time.Now()
	if err := n.client.CoreV1().Pods("default").Delete(ctx, "hooks", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	termAt := map[string]time.Duration{}
	var goneAt time.Duration
	for time.Since(deleted) < 20*time.Second && (goneAt == 0 || len(termAt) < len(pod.Spec.Containers)) {
		for _, c := range pod.Spec.Containers {
			if _, ok := termAt[c.Name]; !ok {
				if b, err := os.ReadFile(mark(c.Name)); err == nil && strings.Contains(string(b), "term") {
					termAt[c.Name] = time.Since(deleted)
				}
			}
		}
		if goneAt == 0 {
			if _, err := n.client.CoreV1().Pods("default").Get(ctx, "hooks", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				goneAt = time.Since(deleted)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("SIGTERM seen after deletion: %v; pod gone after %v", termAt, goneAt)

	if b, _ := os.ReadFile(mark("exec")); string(b) != "hook\nterm\n" {
		t.Errorf("exec container: want the hook's line, then the SIGTERM's; got %q", b)
	}
	if d, ok := termAt["sleep"]; !ok || d < 2*time.Second {
		t.Errorf("sleep 2 hook: SIGTERM after %v (seen: %v), want ≥ 2s", d, ok)
	}
	if d, ok := termAt["none"]; !ok || d > 2*time.Second {
		t.Errorf("container without a hook: SIGTERM after %v (seen: %v), want at once", d, ok)
	}
	if _, ok := termAt["failing"]; !ok {
		t.Errorf("the container whose hook failed got no SIGTERM")
	}
	// The 60 s hook is cut at the 4 s grace period; the SIGTERM follows.
	if d, ok := termAt["outlasts"]; !ok || d < 4*time.Second || d > 10*time.Second {
		t.Errorf("hook outlasting the grace period: SIGTERM after %v (seen: %v), want between 4s and 10s", d, ok)
	}
	if goneAt == 0 || goneAt > 15*time.Second {
		t.Errorf("pod not gone within 15s (after %v)", goneAt)
	}
	evs, err := n.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=hooks"})
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, e := range evs.Items {
		if e.Reason == "FailedPreStopHook" {
			failed[e.InvolvedObject.FieldPath] = true
		}
	}
	for _, c := range []string{"failing", "outlasts"} {
		if !failed["spec.containers{"+c+"}"] {
			t.Errorf("no FailedPreStopHook event for container %s (events' field paths: %v)", c, failed)
		}
	}
	if len(failed) != 2 {
		t.Errorf("FailedPreStopHook for %v, want only failing and outlasts", failed)
	}
}
