package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/apiserver/pki"
	"github.com/nodenet/nodenet/internal/testapi"

	"github.com/nodenet/nodenet/node/shim"
)

func TestParseLogOptions(t *testing.T) {
	for q, want := range map[string]string{
		"tailLines=-1":        "tailLines",
		"limitBytes=0":        "limitBytes",
		"sinceSeconds=0":      "sinceSeconds",
		"sinceTime=yesterday": "sinceTime",
		"sinceSeconds=5&sinceTime=2020-01-01T00:00:00Z": "at most one of sinceTime or sinceSeconds",
		"follow=maybe": "follow",
		"stream=Both":  "stream",
	} {
		v, _ := url.ParseQuery(q)
		if _, err := parseLogOptions(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one naming %q", q, err, want)
		}
	}
}

func TestStreamLogFormats(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var b bytes.Buffer
	for i := range 5 {
		stream := "stdout"
		if i == 3 {
			stream = "stderr"
		}
		b.Write(shim.CRILine(t0.Add(time.Duration(i)*time.Second), stream, true, fmt.Appendf(nil, "line %d", i)))
	}
	b.Write(shim.CRILine(t0.Add(5*time.Second), "stdout", false, []byte("part-")))
	b.Write(shim.CRILine(t0.Add(5*time.Second), "stdout", true, []byte("end")))
	b.WriteString("not a cri line\n")
	path := writeFixture(t, dir, "0.log", b.String())
	read := func(o logOptions) string {
		var out bytes.Buffer
		if err := streamLog(context.Background(), path, o, &out, func() bool { return false }); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	all := logOptions{tail: -1}
	if got := read(all); got != "line 0\nline 1\nline 2\nline 3\nline 4\npart-end\nnot a cri line\n" {
		t.Errorf("all: %q", got)
	}
	if got := read(logOptions{tail: 2}); got != "end\nnot a cri line\n" {
		t.Errorf("tail 2: %q", got)
	}
	if got := read(logOptions{tail: 1, timestamps: true}); got != "0001-01-01T00:00:00Z not a cri line\n" {
		t.Errorf("tail 1 with timestamps: %q", got)
	}
	if got := read(logOptions{tail: 1, timestamps: true, since: t0}); !strings.HasSuffix(got, "not a cri line\n") {
		t.Errorf("untimed line with since: %q", got)
	}
	if got := read(logOptions{tail: -1, since: t0.Add(3 * time.Second), stream: "stdout"}); got != "line 4\npart-end\nnot a cri line\n" {
		t.Errorf("since +3s, stdout: %q", got)
	}
	if got := read(logOptions{tail: -1, limit: 9}); got != "line 0\nli" {
		t.Errorf("limit 9: %q", got)
	}
	if got := read(logOptions{tail: 2, timestamps: true, since: t0, stream: "stderr"}); got != "2026-01-02T03:04:08Z line 3\n0001-01-01T00:00:00Z not a cri line\n" {
		t.Errorf("stderr tail 1: %q", got)
	}
}

var lineRE = regexp.MustCompile(`^line (\d+)$`)

// lineNumbers parses "line N" output.
func lineNumbers(t *testing.T, out string) []int {
	t.Helper()
	var ns []int
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		m := lineRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unexpected log line %q in:\n%s", l, out)
		}
		n, _ := strconv.Atoi(m[1])
		ns = append(ns, n)
	}
	return ns
}

// TestPodLogsThroughAgent reads a running pod's log through the API
// server, which asks the node's agent over the authenticated kubelet port,
// with client-go and with the real kubectl.
func TestPodLogsThroughAgent(t *testing.T) {
	kubectl := kubectlBinary(t)
	n := startNode(t)
	ctx := testapi.Context(t)
	kc := n.srv.KubeconfigPath()
	n.runPod(t, "echo-1", sh(`i=0; while :; do echo "line $i"; i=$((i+1)); sleep 0.2; done`), corev1.RestartPolicyAlways)
	n.waitPod(t, "echo-1", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	logs := func(o *corev1.PodLogOptions) (string, error) { return readLogs(ctx, n, "echo-1", o) }
	var all string
	testapi.Eventually(t, 20*time.Second, "five log lines", func() bool {
		var err error
		all, err = logs(&corev1.PodLogOptions{})
		return err == nil && strings.Count(all, "\n") >= 5
	})
	if ns := lineNumbers(t, all); ns[0] != 0 || ns[len(ns)-1] != len(ns)-1 {
		t.Errorf("full log is not line 0..N: %v", ns)
	}
	out, err := logs(&corev1.PodLogOptions{TailLines: ptr.To[int64](2)})
	if ns := lineNumbers(t, out); err != nil || len(ns) != 2 || ns[1] < 4 {
		t.Errorf("tail 2: %q, %v", out, err)
	}
	out, err = logs(&corev1.PodLogOptions{Timestamps: true, TailLines: ptr.To[int64](3)})
	stamped := regexp.MustCompile(`(?m)^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z) line \d+$`)
	if m := stamped.FindAllStringSubmatch(out, -1); err != nil || len(m) != 3 {
		t.Errorf("timestamps: %q, %v", out, err)
	} else if ts, _ := time.Parse(time.RFC3339Nano, m[0][1]); time.Since(ts) > time.Minute || time.Since(ts) < 0 {
		t.Errorf("timestamp %s is not recent", m[0][1])
	}
	if out, err = logs(&corev1.PodLogOptions{LimitBytes: ptr.To[int64](8)}); err != nil || out != "line 0\nl" {
		t.Errorf("limitBytes 8: %q, %v", out, err)
	}
	since := metav1.NewTime(time.Now().Add(time.Second).Truncate(time.Second))
	time.Sleep(time.Until(since.Time) + 500*time.Millisecond)
	out, err = logs(&corev1.PodLogOptions{SinceTime: &since, Timestamps: true})
	if err != nil || out == "" {
		t.Errorf("sinceTime: %q, %v", out, err)
	}
	for _, m := range stamped.FindAllStringSubmatch(out, -1) {
		if ts, _ := time.Parse(time.RFC3339Nano, m[1]); ts.Before(since.Time) {
			t.Errorf("sinceTime %s returned a line of %s", since.Time, ts)
		}
	}
	if out, err = logs(&corev1.PodLogOptions{SinceSeconds: ptr.To[int64](1)}); err != nil || strings.Contains(out, "line 0\n") || out == "" {
		t.Errorf("sinceSeconds 1: %q, %v", out, err)
	}

	// Follow: lines written after the request arrive on the stream.
	fctx, cancel := context.WithCancel(ctx)
	rc, err := n.client.CoreV1().Pods("default").GetLogs("echo-1", &corev1.PodLogOptions{Follow: true, TailLines: ptr.To[int64](1)}).Stream(fctx)
	if err != nil {
		t.Fatalf("follow: %v", err)
	}
	sc := bufio.NewScanner(rc)
	var first, got int
	for i := 0; i < 6 && sc.Scan(); i++ {
		ns := lineNumbers(t, sc.Text())
		if i == 0 {
			first = ns[0]
		}
		got = ns[0]
	}
	cancel()
	rc.Close()
	if got != first+5 {
		t.Errorf("follow: lines %d..%d, want 6 consecutive", first, got)
	}

	// Errors say what is wrong.
	for o, want := range map[*corev1.PodLogOptions]string{
		{Container: "nope"}:              "container nope is not valid for pod echo-1",
		{Previous: true}:                 `previous terminated container "main" in pod "echo-1" not found`,
		{TailLines: ptr.To[int64](-1)}:   "tailLines",
		{SinceSeconds: ptr.To[int64](0)}: "sinceSeconds",
	} {
		if _, err := logs(o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: err %v, want %q", o, err, want)
		}
	}

	// The real kubectl.
	out, err = runKubectl(t, kubectl, kc, "logs", "echo-1")
	if err != nil || !strings.HasPrefix(out, "line 0\nline 1\n") {
		t.Errorf("kubectl logs: %v\n%s", err, out)
	}
	out, err = runKubectl(t, kubectl, kc, "logs", "--tail=1", "echo-1")
	if ns := lineNumbers(t, out); err != nil || len(ns) != 1 {
		t.Errorf("kubectl logs --tail=1: %v\n%s", err, out)
	}
	out, err = runKubectl(t, kubectl, kc, "logs", "-c", "nope", "echo-1")
	if err == nil || !strings.Contains(out, "container nope is not valid for pod echo-1") {
		t.Errorf("kubectl logs -c nope: %v\n%s", err, out)
	}
	kubectlFollow(t, kubectl, kc)
	kubectlUnsupported(t, kubectl, kc)
	agentRefusesStrangers(t, n)

	// The container outlives a killed agent and keeps logging through its
	// shim; the new agent serves the log on.
	started := n.waitPod(t, "echo-1", "running", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}).Status.ContainerStatuses[0].State.Running.StartedAt
	n.stopAgent(syscall.SIGKILL)
	n.startAgent(t)
	last := func() int {
		out, err := logs(&corev1.PodLogOptions{TailLines: ptr.To[int64](1)})
		if err != nil || out == "" {
			return -1
		}
		return lineNumbers(t, out)[0]
	}
	var before int
	testapi.Eventually(t, 30*time.Second, "logs from the restarted agent", func() bool { before = last(); return before >= 0 })
	testapi.Eventually(t, 10*time.Second, "new log lines after the agent restart", func() bool { return last() > before })
	// The adopted container keeps its start time.
	time.Sleep(3 * time.Second)
	if p := n.waitPod(t, "echo-1", "running", func(*corev1.Pod) bool { return true }); !p.Status.ContainerStatuses[0].State.Running.StartedAt.Equal(&started) {
		t.Errorf("startedAt %v after the agent restart, %v before", p.Status.ContainerStatuses[0].State.Running.StartedAt, started)
	}

	// Deleting the pod stops its container, with the kubelet's event.
	if err := n.client.CoreV1().Pods("default").Delete(ctx, "echo-1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](5)}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, 30*time.Second, "Killing event", func() bool {
		evs, err := n.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "echo-1" && e.Reason == "Killing" && e.Message == "Stopping container main" && e.Source.Component == "kubelet" {
				return true
			}
		}
		return false
	})
}

// kubectlFollow runs kubectl logs -f until it has printed lines written
// after it started, then stops it.
func kubectlFollow(t *testing.T, kubectl, kc string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kc, "--cache-dir", filepath.Join(t.TempDir(), "c"), "logs", "-f", "--tail=1", "echo-1")
	cmd.Env = []string{"HOME=" + t.TempDir()}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	var seen []int
	for len(seen) < 5 && sc.Scan() {
		seen = append(seen, lineNumbers(t, sc.Text())[0])
	}
	if len(seen) < 5 || seen[4] != seen[0]+4 {
		t.Errorf("kubectl logs -f printed %v (ctx %v)", seen, ctx.Err())
	}
}

// kubectlUnsupported checks exec, attach and port-forward say that nodenet
// does not have them instead of "not found".
func kubectlUnsupported(t *testing.T, kubectl, kc string) {
	t.Helper()
	for _, args := range [][]string{
		{"exec", "echo-1", "--", "true"},
		{"attach", "echo-1"},
		{"port-forward", "pod/echo-1", ":8080"}, // any free local port
	} {
		out, err := runKubectl(t, kubectl, kc, args...)
		want := "pods/" + strings.ReplaceAll(args[0], "-", "") + " is not supported by nodenet"
		if err == nil || !strings.Contains(out, want) || strings.Contains(out, "NotFound") {
			t.Errorf("kubectl %s: %v\n%s\nwant %q", strings.Join(args, " "), err, out, want)
		}
	}
}

// agentRefusesStrangers: the kubelet port takes only the API server's
// client certificate, and the API server only the pinned agent.
func agentRefusesStrangers(t *testing.T, n *testNode) {
	t.Helper()
	ctx := testapi.Context(t)
	node, err := n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)))
	// A certificate from another CA with the right name.
	other, err := pki.EnsureKubeletClient(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string][]tls.Certificate{"no client certificate": nil, "a certificate of another CA": {*other}} {
		cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(n.ns),
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: certs}}}
		resp, err := cl.Get("https://" + addr + "/containerLogs/default/echo-1/main")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Errorf("agent served a caller with %s: %d %q", name, resp.StatusCode, b)
		}
	}
	// A pin that does not match: the API server refuses the agent.
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"00"}}}`, pki.KubeletServingCertAnnotation)
	if _, err := n.client.CoreV1().Nodes().Patch(ctx, n.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = readLogs(ctx, n, "echo-1", &corev1.PodLogOptions{})
	if err == nil || !strings.Contains(err.Error(), "does not match the pin") {
		t.Errorf("logs with a wrong pin: %v", err)
	}
	restore := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, pki.KubeletServingCertAnnotation, node.Annotations[pki.KubeletServingCertAnnotation])
	if _, err := n.client.CoreV1().Nodes().Patch(ctx, n.name, types.MergePatchType, restore, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// readLogs reads a log as kubectl does: through Stream, which (unlike
// DoRaw) decodes the API server's Status on errors.
func readLogs(ctx context.Context, n *testNode, pod string, o *corev1.PodLogOptions) (string, error) {
	rc, err := n.client.CoreV1().Pods("default").GetLogs(pod, o).Stream(ctx)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}
