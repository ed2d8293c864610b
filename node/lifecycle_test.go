package node

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/node/shim"
)

// The pod lifecycle's pieces that need neither a cluster nor the kernel:
// the state files a restarted agent adopts from, the status a worker posts,
// the crash-loop back-off and its events, and the log files' layout and
// format.

// offlineAgent is an agent with a fake client and a recorder that keeps
// events; it never runs.
func offlineAgent(t *testing.T) (*Agent, *record.FakeRecorder) {
	t.Helper()
	a, err := New(Options{Client: fake.NewClientset(), NodeName: "node-a", NodeIP: "172.30.0.11", StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(16)
	a.recorder = rec
	return a, rec
}

func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func testPod(policy corev1.RestartPolicy, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1",
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))},
		Spec: corev1.PodSpec{NodeName: "node-a", RestartPolicy: policy}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "img-" + c})
	}
	return p
}

func TestStateFilesRoundTrip(t *testing.T) {
	a, _ := offlineAgent(t)
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := &sandboxState{UID: "uid-1", Namespace: "ns", Name: "p", Netns: "nn-p", ContainerID: "0123456789abcdef",
		IPs: []string{"10.244.1.5", "fd00::5"}, PIDs: map[string]int{"c": 42},
		Restarts: map[string]int32{"c": 3}, Started: map[string]time.Time{"c": started}}
	if err := a.saveState(want); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.statePath("uid-1") + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
	// What a restarted agent must not trip over: a torn write, a record
	// without a UID, a file of another kind.
	for name, content := range map[string]string{"torn.json": `{"uid":"x"`, "nouid.json": `{"name":"q"}`, "notes.txt": "hi"} {
		if err := os.WriteFile(filepath.Join(a.o.StateDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := a.loadState()
	if len(got) != 1 {
		t.Fatalf("loaded %d records, want 1: %v", len(got), got)
	}
	s := got["uid-1"]
	if s == nil || s.Netns != want.Netns || s.ContainerID != want.ContainerID || !slices.Equal(s.IPs, want.IPs) ||
		s.PIDs["c"] != 42 || s.Restarts["c"] != 3 || !s.Started["c"].Equal(started) {
		t.Errorf("loaded %+v, want %+v", s, want)
	}
	if a.adopt["uid-1"] != s {
		t.Error("loadState did not keep the records for adoption")
	}
	// Saving again replaces the record.
	want.Restarts["c"] = 4
	if err := a.saveState(want); err != nil {
		t.Fatal(err)
	}
	if got := a.loadState()["uid-1"]; got.Restarts["c"] != 4 {
		t.Errorf("after a second save: restarts %d, want 4", got.Restarts["c"])
	}
}

func condStatus(st corev1.PodStatus, typ corev1.PodConditionType) corev1.PodCondition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return corev1.PodCondition{}
}

func TestPendingAndFailedStatus(t *testing.T) {
	a, _ := offlineAgent(t)
	w := newPodWorker(a, "uid-1")
	pod := testPod(corev1.RestartPolicyAlways, "c", "d")
	st := w.pendingStatus(pod, "waiting for the CNI network")
	if st.Phase != corev1.PodPending || st.Message != "waiting for the CNI network" || st.HostIP != "172.30.0.11" ||
		!st.StartTime.Equal(&pod.CreationTimestamp) {
		t.Errorf("pending status %+v", st)
	}
	if c := condStatus(st, corev1.PodScheduled); c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&pod.CreationTimestamp) {
		t.Errorf("PodScheduled %+v: want True since the pod's creation", c)
	}
	if c := condStatus(st, corev1.PodReady); c.Status != corev1.ConditionFalse {
		t.Errorf("PodReady %+v", c)
	}

	w.failedAt = time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC)
	st = w.failedStatus(pod, "StartError", "no such command")
	if st.Phase != corev1.PodFailed || st.Reason != "StartError" || len(st.ContainerStatuses) != 2 {
		t.Fatalf("failed status %+v", st)
	}
	for _, cs := range st.ContainerStatuses {
		term := cs.State.Terminated
		if term == nil || term.ExitCode != 128 || term.Reason != "StartError" || !term.StartedAt.Time.Equal(w.failedAt) {
			t.Errorf("container %s: %+v, want terminated with 128 at the failure", cs.Name, cs.State)
		}
	}
}

// TestKeepTransitions: a condition keeps its transition time while its
// status stays; a change gets a new one.
func TestKeepTransitions(t *testing.T) {
	a, _ := offlineAgent(t)
	w := newPodWorker(a, "uid-1")
	pod := testPod(corev1.RestartPolicyAlways, "c")
	long := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: long}}
	conds := w.keepTransitions(pod, []corev1.PodCondition{condition(corev1.PodReady, false, metav1.Time{})})
	if !conds[0].LastTransitionTime.Equal(&long) {
		t.Errorf("unchanged Ready=False got transition time %v, want %v", conds[0].LastTransitionTime, long)
	}
	before := time.Now().Add(-time.Second)
	conds = w.keepTransitions(pod, []corev1.PodCondition{condition(corev1.PodReady, true, metav1.Time{})})
	if conds[0].LastTransitionTime.Time.Before(before) {
		t.Errorf("Ready turned True at %v, want now", conds[0].LastTransitionTime)
	}
	// What the worker posted last wins over the informer's older copy.
	w.posted.Conditions = conds
	again := w.keepTransitions(pod, []corev1.PodCondition{condition(corev1.PodReady, true, metav1.Time{})})
	if !again[0].LastTransitionTime.Equal(&conds[0].LastTransitionTime) {
		t.Errorf("Ready still True moved from %v to %v", conds[0].LastTransitionTime, again[0].LastTransitionTime)
	}
}

// runningWorker is a worker whose sandbox exists, with the given
// containers' states.
func runningWorker(t *testing.T, ctrs ...*container) (*podWorker, *record.FakeRecorder) {
	t.Helper()
	a, rec := offlineAgent(t)
	w := newPodWorker(a, "uid-1")
	w.sb = &sandboxState{UID: "uid-1", ContainerID: "0123456789abcdef0123", IPs: []string{"10.244.1.5", "fd00::5"}, PIDs: map[string]int{}}
	for _, c := range ctrs {
		w.ctrs[c.name] = c
	}
	return w, rec
}

func TestRunningStatus(t *testing.T) {
	now := time.Now()
	t.Run("all running and ready", func(t *testing.T) {
		w, _ := runningWorker(t, &container{name: "c", startedAt: now}, &container{name: "d", startedAt: now, restarts: 2})
		st := w.runningStatus(testPod(corev1.RestartPolicyAlways, "c", "d"))
		if st.Phase != corev1.PodRunning || st.PodIP != "10.244.1.5" || len(st.PodIPs) != 2 {
			t.Fatalf("status %+v", st)
		}
		if c := condStatus(st, corev1.PodReady); c.Status != corev1.ConditionTrue || c.Reason != "" {
			t.Errorf("PodReady %+v", c)
		}
		d := st.ContainerStatuses[1]
		if d.State.Running == nil || !d.Ready || d.RestartCount != 2 || !*d.Started || d.ContainerID != "nodenet://0123456789ab-d" {
			t.Errorf("container d %+v", d)
		}
	})
	t.Run("one not started, one not ready", func(t *testing.T) {
		w, _ := runningWorker(t, &container{name: "c", startedAt: now})
		pod := testPod(corev1.RestartPolicyAlways, "c", "d")
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{}
		st := w.runningStatus(pod)
		if st.ContainerStatuses[1].State.Waiting == nil || st.ContainerStatuses[1].State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("d: %+v, want waiting in ContainerCreating", st.ContainerStatuses[1].State)
		}
		c := condStatus(st, corev1.ContainersReady)
		if c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" || c.Message != "containers with unready status: [c d]" {
			t.Errorf("ContainersReady %+v", c)
		}
	})
	for _, tc := range []struct {
		policy corev1.RestartPolicy
		codes  []int
		want   corev1.PodPhase
	}{
		{corev1.RestartPolicyNever, []int{0, 0}, corev1.PodSucceeded},
		{corev1.RestartPolicyNever, []int{0, 1}, corev1.PodFailed},
		{corev1.RestartPolicyOnFailure, []int{0, 0}, corev1.PodSucceeded},
		// OnFailure restarts the failed one: still running.
		{corev1.RestartPolicyOnFailure, []int{0, 1}, corev1.PodRunning},
		{corev1.RestartPolicyAlways, []int{0, 0}, corev1.PodRunning},
	} {
		w, _ := runningWorker(t,
			&container{name: "c", startedAt: now.Add(-time.Minute), finishedAt: now, exited: true, exitCode: tc.codes[0]},
			&container{name: "d", startedAt: now.Add(-time.Minute), finishedAt: now, exited: true, exitCode: tc.codes[1]})
		st := w.runningStatus(testPod(tc.policy, "c", "d"))
		if st.Phase != tc.want {
			t.Errorf("%s with exit codes %v: phase %s, want %s", tc.policy, tc.codes, st.Phase, tc.want)
		}
		if term := st.ContainerStatuses[1].State.Terminated; term == nil || term.ExitCode != int32(tc.codes[1]) ||
			(tc.codes[1] == 0) != (term.Reason == "Completed") {
			t.Errorf("%s: d terminated %+v", tc.policy, term)
		}
		if tc.want != corev1.PodRunning && condStatus(st, corev1.PodReady).Reason != "PodCompleted" {
			t.Errorf("%s: PodReady %+v, want reason PodCompleted", tc.policy, condStatus(st, corev1.PodReady))
		}
	}
}

// TestCrashLoopBackOff follows the kubelet's numbers: the first crash
// restarts at once, the next ones wait 10 s, 20 s, … up to 5 min, a run of
// 10 min resets the wait, and each wait is announced once.
func TestCrashLoopBackOff(t *testing.T) {
	now := time.Now()
	c := &container{name: "c", startedAt: now.Add(-time.Second), finishedAt: now.Add(-time.Millisecond), exited: true, exitCode: 1}
	w, rec := runningWorker(t, c)
	pod := testPod(corev1.RestartPolicyAlways, "c")

	if w.backingOff(pod, c) {
		t.Fatal("first crash: backing off, want an immediate restart")
	}
	if c.backoff != backoffInitial || c.inBackOff() {
		t.Fatalf("after the first restart: backoff %v, in back-off %v", c.backoff, c.inBackOff())
	}
	// It crashes again at once: wait, announced once however often asked.
	c.startedAt, c.finishedAt = time.Now(), time.Now()
	for range 3 {
		if !w.backingOff(pod, c) {
			t.Fatal("second crash: restarted at once, want a back-off")
		}
	}
	evs := events(rec)
	if len(evs) != 1 || evs[0] != "Warning BackOff Back-off restarting failed container c in pod p_ns(uid-1)" {
		t.Errorf("events %q, want one BackOff warning", evs)
	}
	if !c.inBackOff() {
		t.Error("not reported in back-off while waiting")
	}
	st := w.runningStatus(pod)
	if wt := st.ContainerStatuses[0].State.Waiting; wt == nil || wt.Reason != "CrashLoopBackOff" || !strings.Contains(wt.Message, "back-off 10s") ||
		st.ContainerStatuses[0].LastTerminationState.Terminated == nil {
		t.Errorf("status while backing off %+v", st.ContainerStatuses[0])
	}

	// The wait doubles up to the cap.
	var waits []time.Duration
	for range 8 {
		c.startedAt, c.finishedAt = time.Now().Add(-time.Hour), time.Now().Add(-time.Hour+time.Second)
		if w.backingOff(pod, c) {
			t.Fatal("a crash an hour ago still waits")
		}
		waits = append(waits, c.backoff)
	}
	if want := []time.Duration{20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, backoffMax, backoffMax, backoffMax, backoffMax}; !slices.Equal(waits, want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
	// A long run resets it.
	c.startedAt, c.finishedAt = time.Now().Add(-backoffReset-time.Minute), time.Now()
	if w.backingOff(pod, c) || c.backoff != backoffInitial {
		t.Errorf("after a run of %v: backoff %v, want an immediate restart and %v next", backoffReset, c.backoff, backoffInitial)
	}
}

func TestAgentEvents(t *testing.T) {
	a, rec := offlineAgent(t)
	pod := testPod(corev1.RestartPolicyAlways, "c")
	a.event(pod, "c", corev1.EventTypeNormal, "Started", "Started container %s", "c")
	a.event(pod, "", corev1.EventTypeWarning, "FailedCreatePodSandBox", "no network")
	if evs := events(rec); !slices.Equal(evs, []string{"Normal Started Started container c", "Warning FailedCreatePodSandBox no network"}) {
		t.Errorf("events %q", evs)
	}
	// Without a recorder (before Run) events are dropped, not a panic.
	a.recorder = nil
	a.event(pod, "c", corev1.EventTypeNormal, "Started", "x")
}

func TestLogLayout(t *testing.T) {
	a, _ := offlineAgent(t)
	var uid types.UID = "uid-1"
	p := a.containerLogPath("ns", "p", uid, "c", 10)
	if want := filepath.Join(a.o.StateDir, "logs", "ns_p_uid-1", "c", "10.log"); p != want {
		t.Errorf("log path %s, want %s", p, want)
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"10.log", "9.log", "0.log", "x.log", "3.log.tmp"} {
		writeFixture(t, dir, f, "")
	}
	// Numeric order: run 10 is the newest, after 9.
	if runs := logRuns(dir); !slices.Equal(runs, []int{0, 9, 10}) {
		t.Errorf("runs %v, want [0 9 10]", runs)
	}
}

func TestCRILines(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))
	line := shim.CRILine(at, "stderr", false, []byte("half a line"))
	if string(line) != "2026-01-02T02:04:05.0000006Z stderr P half a line\n" {
		t.Errorf("CRI line %q", line)
	}
	r := parseRecord(bytes.TrimSuffix(line, []byte("\n")))
	if !r.t.Equal(at) || r.stream != "stderr" || r.full || string(r.content) != "half a line" {
		t.Errorf("parsed %+v", r)
	}
	// Content may hold spaces and look like a record itself.
	r = parseRecord(bytes.TrimSuffix(shim.CRILine(at, "stdout", true, []byte("a b F c")), []byte("\n")))
	if !r.full || string(r.content) != "a b F c" {
		t.Errorf("parsed %+v", r)
	}
	for _, raw := range []string{"plain output", "2026-01-02T02:04:05Z stdout X tag", "yesterday stdout F x"} {
		if r := parseRecord([]byte(raw)); !r.full || !r.t.IsZero() || string(r.content) != raw {
			t.Errorf("%q: parsed %+v, want the line as it is", raw, r)
		}
	}
}

func TestSplitComplete(t *testing.T) {
	lines, n := splitComplete([]byte("a\nb\npartial"))
	if len(lines) != 2 || string(lines[1]) != "b" || n != 4 {
		t.Errorf("splitComplete: %q, %d", lines, n)
	}
	if lines, n := splitComplete([]byte("partial")); lines != nil || n != 0 {
		t.Errorf("splitComplete without a newline: %q, %d", lines, n)
	}
}

// A restarted agent whose recorded sandbox is gone (the node restarted)
// takes the pod out of its Services before anything else: the release of
// the old sandbox and the new one's set-up take seconds, during which the
// old IP answers nothing.
func TestSandboxGoneNotReadyAtOnce(t *testing.T) {
	a, _ := offlineAgent(t)
	pod := testPod(corev1.RestartPolicyAlways, "c")
	pod.Spec.Containers[0].Command = []string{"/bin/true"}
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.7", Conditions: []corev1.PodCondition{
		condition(corev1.PodScheduled, true, since), condition(corev1.PodReady, true, since), condition(corev1.ContainersReady, true, since)},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true}}}
	ctx := t.Context()
	if _, err := a.o.Client.CoreV1().Pods("ns").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.adopt = map[types.UID]*sandboxState{pod.UID: {UID: pod.UID, Namespace: "ns", Name: "p", Netns: "nn-test-gone-" + randomID()[:8], ContainerID: "c1"}}
	w := newPodWorker(a, pod.UID)
	// No CNI configuration here: releasing the old sandbox fails, and the
	// pod must already be not ready by then.
	if err := w.start(ctx, pod); err == nil {
		t.Fatal("start without a CNI configuration succeeded")
	}
	got, err := a.o.Client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := got.Status
	if c := condStatus(st, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != "SandboxChanged" {
		t.Errorf("Ready %+v, want False (SandboxChanged)", c)
	}
	if c := condStatus(st, corev1.ContainersReady); c.Status != corev1.ConditionFalse {
		t.Errorf("ContainersReady %+v, want False", c)
	}
	if c := condStatus(st, corev1.PodScheduled); c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&since) {
		t.Errorf("PodScheduled %+v, want unchanged", c)
	}
	if st.Phase != corev1.PodRunning || st.PodIP != "10.244.1.7" || st.ContainerStatuses[0].Ready {
		t.Errorf("status %+v: want the phase and IP kept, the container not ready", st)
	}
	// The record is kept for the next attempt at releasing it.
	if a.adopt[pod.UID] == nil {
		t.Error("the stale record was dropped before its release")
	}
}

// The agent runs its shim as nodenet-shim when that was built beside its
// binary, else as `nodenet logshim` (the same code), and has none without
// a binary of its own.
func TestShimCommand(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "nodenet")
	if got := shimCommand(self); !slices.Equal(got, []string{self, "logshim"}) {
		t.Errorf("without nodenet-shim: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "nodenet-shim"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := shimCommand(self); !slices.Equal(got, []string{filepath.Join(dir, "nodenet-shim")}) {
		t.Errorf("with nodenet-shim: %q", got)
	}
	if got := shimCommand(""); got != nil {
		t.Errorf("without a binary: %q", got)
	}
	if e := newNodeViewExec(shimCommand(self), dir); e == nil || !slices.Equal(e.(*nodeViewExec).shim, []string{filepath.Join(dir, "nodenet-shim")}) {
		t.Errorf("CNI exec through the shim: %+v", e)
	}
}
