package node

import (
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodenet/nodenet/internal/testapi"
)

// describeTime is how kubectl describe prints a time (RFC 1123Z).
const describeTime = `\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}`

func mustMatch(t *testing.T, what, out string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(out) {
			t.Errorf("%s lacks %q:\n%s", what, p, out)
		}
	}
	if strings.Contains(out, "0001") {
		t.Errorf("%s shows a zero time:\n%s", what, out)
	}
}

// TestFailedPodsTimesAndEvents: a crashing container gets real times,
// restarts with back-off, keeps its last state, and the agent emits the
// kubelet's events (Created, Started, BackOff and Failed as Warnings)
// through the core/v1 event recorder, visible in kubectl describe.
func TestFailedPodsTimesAndEvents(t *testing.T) {
	kubectl := kubectlBinary(t)
	n := startNode(t)
	ctx := testapi.Context(t)
	n.runPod(t, "crash", sh("echo boom $(date +%s%N); exit 1"), corev1.RestartPolicyAlways)
	n.runPod(t, "once", sh("echo bye; exit 1"), corev1.RestartPolicyNever)
	n.runPod(t, "nocmd", []string{"no-such-command-xyz"}, corev1.RestartPolicyNever)
	pod := n.waitPod(t, "crash", "restarted and backing off", func(p *corev1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount >= 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CrashLoopBackOff"
	})
	last := pod.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if last == nil || last.ExitCode != 1 || last.Reason != "Error" || last.StartedAt.IsZero() || last.FinishedAt.Before(&last.StartedAt) {
		t.Errorf("last state %+v", last)
	}
	// The previous run's log is kept beside the current one's.
	logs := func(previous bool) string {
		out, err := readLogs(ctx, n, "crash", &corev1.PodLogOptions{Previous: previous})
		if err != nil {
			t.Fatalf("logs (previous %v): %v", previous, err)
		}
		return out
	}
	prev, cur := logs(true), logs(false)
	if !regexp.MustCompile(`^boom \d+\n$`).MatchString(prev) || !regexp.MustCompile(`^boom \d+\n$`).MatchString(cur) || prev == cur {
		t.Errorf("previous log %q, current %q: want two different runs", prev, cur)
	}
	testapi.Eventually(t, 30*time.Second, "BackOff warning", func() bool {
		evs, err := n.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "crash").String()})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "BackOff" && e.Source.Component == "kubelet" && e.Source.Host == n.name &&
				e.InvolvedObject.FieldPath == "spec.containers{main}" {
				return true
			}
		}
		return false
	})
	out, err := runKubectl(t, kubectl, n.srv.KubeconfigPath(), "describe", "pod", "crash")
	if err != nil {
		t.Fatalf("kubectl describe pod crash: %v\n%s", err, out)
	}
	mustMatch(t, "describe pod crash", out,
		`State:\s+Waiting\s+Reason:\s+CrashLoopBackOff`,
		`Last State:\s+Terminated\s+Reason:\s+Error\s+Exit Code:\s+1\s+Started:\s+`+describeTime+`\s+Finished:\s+`+describeTime,
		`Restart Count:\s+[1-9]`,
		`Normal\s+Started\s+.*kubelet\s+Started container main`,
		`Normal\s+Created\s+.*kubelet\s+Created container: main`,
		`Warning\s+BackOff\s+.*kubelet\s+Back-off restarting failed container main in pod crash_default`)

	n.waitPod(t, "once", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	out, err = runKubectl(t, kubectl, n.srv.KubeconfigPath(), "describe", "pod", "once")
	if err != nil {
		t.Fatalf("kubectl describe pod once: %v\n%s", err, out)
	}
	mustMatch(t, "describe pod once", out,
		`Status:\s+Failed`,
		`State:\s+Terminated\s+Reason:\s+Error\s+Exit Code:\s+1\s+Started:\s+`+describeTime+`\s+Finished:\s+`+describeTime,
		`Ready\s+False`)

	n.waitPod(t, "nocmd", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	out, err = runKubectl(t, kubectl, n.srv.KubeconfigPath(), "describe", "pod", "nocmd")
	if err != nil {
		t.Fatalf("kubectl describe pod nocmd: %v\n%s", err, out)
	}
	mustMatch(t, "describe pod nocmd", out,
		`State:\s+Terminated\s+Reason:\s+StartError\s+Message:.*\s+Exit Code:\s+128\s+Started:\s+`+describeTime+`\s+Finished:\s+`+describeTime,
		`Warning\s+Failed\s+.*kubelet\s+Error: container "main": command "no-such-command-xyz" not found`)
}
