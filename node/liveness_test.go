package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/internal/testapi"
)

// TestLivenessProbeRestartsContainer: a container whose liveness probe
// fails FailureThreshold times in a row is stopped and restarted (restart
// count, Unhealthy and Killing events), as the kubelet does; one that
// passes its probe is left alone, and a passing readiness probe makes it
// Ready.
func TestLivenessProbeRestartsContainer(t *testing.T) {
	n := startNode(t)
	ctx := testapi.Context(t)
	flag := filepath.Join(t.TempDir(), "healthy")
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-e", path}}},
			PeriodSeconds: 1, FailureThreshold: 2}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "live", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: n.name, TerminationGracePeriodSeconds: ptr.To[int64](1),
		Containers: []corev1.Container{
			{Name: "probed", Image: "host", Command: sh("exec sleep 3600"), LivenessProbe: probe(flag), ReadinessProbe: probe(flag)},
			{Name: "steady", Image: "host", Command: sh("exec sleep 3600")},
		}}}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.dumpOnFailure(t, "default", "live")
	status := func(p *corev1.Pod, name string) corev1.ContainerStatus {
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == name {
				return s
			}
		}
		return corev1.ContainerStatus{}
	}
	n.waitPod(t, "live", "probed container ready", func(p *corev1.Pod) bool { return status(p, "probed").Ready })
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	p := n.waitPod(t, "live", "probed container restarted", func(p *corev1.Pod) bool { return status(p, "probed").RestartCount >= 1 })
	if s := status(p, "steady"); s.RestartCount != 0 {
		t.Errorf("the container without a failing probe restarted too: %+v", s)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p = n.waitPod(t, "live", "probed container ready again", func(p *corev1.Pod) bool {
		return status(p, "probed").Ready && status(p, "probed").State.Running != nil
	})
	restarts := status(p, "probed").RestartCount
	evs, err := n.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=live"})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range evs.Items {
		seen = append(seen, e.Reason+": "+e.Message)
	}
	all := strings.Join(seen, "\n")
	for _, want := range []string{"Unhealthy: Liveness probe failed", "Killing: Container probed failed liveness probe"} {
		if !strings.Contains(all, want) {
			t.Errorf("no event %q; events:\n%s", want, all)
		}
	}
	t.Logf("restarts after the probe failed: %d; events:\n%s", restarts, all)
}
