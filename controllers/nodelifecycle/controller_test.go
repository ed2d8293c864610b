package nodelifecycle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodenet/nodenet/internal/testapi"
)

func TestNodeLifecycle(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	for _, n := range []string{"alive", "dying"} {
		createNode(t, s.Client, n)
	}
	alive := startHeartbeat(t, s.Client, "alive")
	dying := startHeartbeat(t, s.Client, "dying")
	createReadyPod(t, s.Client, "on-alive", "alive")
	createReadyPod(t, s.Client, "on-dying", "dying")
	startController(t, s.Client)

	// Two grace periods of renewals: nothing happens.
	time.Sleep(2 * grace)
	assertHealthy(t, s.Client, "alive")
	assertHealthy(t, s.Client, "dying")

	// Stop renewing one lease; watch for the moment it is marked.
	w, err := s.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "dying").String()})
	if err != nil {
		t.Fatalf("watch node: %v", err)
	}
	defer w.Stop()
	lastRenew := dying.stop()
	var detected time.Time
	deadline := time.After(grace + 5*time.Second)
	for detected.IsZero() {
		select {
		case ev := <-w.ResultChan():
			if n, ok := ev.Object.(*corev1.Node); ok && ev.Type == watch.Modified && readyOf(n).Status == corev1.ConditionUnknown {
				detected = time.Now()
			}
		case <-deadline:
			t.Fatalf("node not marked unreachable within %v of its last renewal", grace+5*time.Second)
		}
	}
	elapsed := detected.Sub(lastRenew)
	t.Logf("marked %v after the last renewal (grace %v)", elapsed, grace)
	if elapsed < grace || elapsed > grace+time.Second {
		t.Errorf("marked %v after the last renewal, want within [%v, %v]", elapsed, grace, grace+time.Second)
	}

	n := getNode(t, s.Client, "dying")
	if r := readyOf(n); r.Reason != ReasonNodeStatusUnknown || r.Message != "Kubelet stopped posting node status." {
		t.Errorf("Ready condition = %+v, want reason NodeStatusUnknown and the upstream message", r)
	}
	testapi.Eventually(t, timeout, "unreachable taints", func() bool {
		n = getNode(t, s.Client, "dying")
		return unreachableTaintCount(n) == 2
	})
	for _, taint := range n.Spec.Taints {
		if taint.TimeAdded == nil {
			t.Errorf("taint %s:%s has no timeAdded", taint.Key, taint.Effect)
		}
	}
	testapi.Eventually(t, timeout, "pod on-dying not ready", func() bool {
		r, cr := podCondition(t, s.Client, "on-dying", corev1.PodReady), podCondition(t, s.Client, "on-dying", corev1.ContainersReady)
		return r.Status == corev1.ConditionFalse && r.Reason == ReasonNodeNotReady && cr.Status == corev1.ConditionFalse
	})
	// A pod that turns up ready on the unreachable node is caught too.
	createReadyPod(t, s.Client, "late", "dying")
	testapi.Eventually(t, timeout, "pod late not ready", func() bool {
		return podCondition(t, s.Client, "late", corev1.PodReady).Status == corev1.ConditionFalse
	})
	assertHealthy(t, s.Client, "alive")
	if c := podCondition(t, s.Client, "on-alive", corev1.PodReady); c.Status != corev1.ConditionTrue {
		t.Errorf("pod on a healthy node: Ready=%s, want True", c.Status)
	}

	// Renewing again brings the node back.
	startHeartbeat(t, s.Client, "dying")
	testapi.Eventually(t, timeout, "node dying ready again", func() bool {
		n = getNode(t, s.Client, "dying")
		return readyOf(n).Status == corev1.ConditionTrue && unreachableTaintCount(n) == 0
	})
	if r := readyOf(n); r.Reason != ReasonNodeLeaseRenewed {
		t.Errorf("Ready reason = %q, want %q", r.Reason, ReasonNodeLeaseRenewed)
	}
	// Pod readiness is the node agent's to restore.
	if c := podCondition(t, s.Client, "on-dying", corev1.PodReady); c.Status != corev1.ConditionFalse {
		t.Errorf("pod on-dying Ready=%s after recovery, want still False (restored by the node agent)", c.Status)
	}
	alive.stop()
}

func TestOnlyOwnUnknownIsRecovered(t *testing.T) {
	s := testapi.Start(t)
	createNode(t, s.Client, "n1")
	startHeartbeat(t, s.Client, "n1")
	// The node agent itself reports NotReady: a renewing lease must not
	// overrule it.
	setNodeReady(t, s.Client, "n1", corev1.ConditionFalse, "KubeletNotReady")
	startController(t, s.Client)
	time.Sleep(grace + time.Second)
	n := getNode(t, s.Client, "n1")
	if r := readyOf(n); r.Status != corev1.ConditionFalse || r.Reason != "KubeletNotReady" || unreachableTaintCount(n) != 0 {
		t.Errorf("node: Ready=%s (%s), %d unreachable taints; want the agent's NotReady untouched and no unreachable taints", r.Status, r.Reason, unreachableTaintCount(n))
	}
}

// TestNotReadyTaint: a reachable node whose agent reports Ready=False gets
// the not-ready NoSchedule and NoExecute taints, its pods are marked not
// ready (their endpoints leave the Services) and those not tolerating
// the NoExecute taint evicted, as upstream does; Ready=True again removes
// the taints. The node's lease keeps renewing throughout, so none of it
// is the unreachable path.
func TestNotReadyTaint(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	createNode(t, s.Client, "n1")
	startHeartbeat(t, s.Client, "n1")
	createReadyPod(t, s.Client, "web", "n1")
	// Nothing tolerating not-ready (see TestEvictionAfterToleration for
	// why an Equal toleration with another value).
	createTolerantPod(t, s.Client, "intolerant", "n1", []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpEqual, Value: "another-value", Effect: corev1.TaintEffectNoExecute}})
	startController(t, s.Client)
	time.Sleep(time.Second)
	if n := getNode(t, s.Client, "n1"); len(n.Spec.Taints) != 0 {
		t.Fatalf("a Ready node has taints %v", n.Spec.Taints)
	}

	setNodeReady(t, s.Client, "n1", corev1.ConditionFalse, "NetworkNotReady")
	testapi.Eventually(t, timeout, "not-ready taints", func() bool { return taintCount(getNode(t, s.Client, "n1"), corev1.TaintNodeNotReady) == 2 })
	testapi.Eventually(t, timeout, "pod web not ready", func() bool {
		return podCondition(t, s.Client, "web", corev1.PodReady).Status == corev1.ConditionFalse
	})
	testapi.Eventually(t, timeout, "pod intolerant evicted", func() bool {
		p, err := s.Client.CoreV1().Pods("default").Get(ctx, "intolerant", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
	})
	if n := getNode(t, s.Client, "n1"); unreachableTaintCount(n) != 0 || readyOf(n).Reason != "NetworkNotReady" {
		t.Errorf("node: Ready reason %q, %d unreachable taints; want the agent's condition and no unreachable taint", readyOf(n).Reason, unreachableTaintCount(n))
	}

	setNodeReady(t, s.Client, "n1", corev1.ConditionTrue, "KubeletReady")
	testapi.Eventually(t, timeout, "not-ready taints removed", func() bool { return len(getNode(t, s.Client, "n1").Spec.Taints) == 0 })
}

func TestNewNodeWithoutLease(t *testing.T) {
	s := testapi.Start(t)
	startController(t, s.Client)
	created := time.Now()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}
	if _, err := s.Client.CoreV1().Nodes().Create(testapi.Context(t), node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node: %v", err)
	}
	// Not marked while it is younger than the grace period...
	for time.Since(created) < grace-300*time.Millisecond {
		if r := readyOf(getNode(t, s.Client, "fresh")); r.Status != "" {
			t.Fatalf("new node marked Ready=%s after %v, before it could have renewed a lease", r.Status, time.Since(created))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// ...but once it is older and never heartbeated, it is.
	testapi.Eventually(t, grace+2*time.Second, "silent new node marked", func() bool {
		n := getNode(t, s.Client, "fresh")
		return readyOf(n).Status == corev1.ConditionUnknown && unreachableTaintCount(n) == 2
	})
}

func TestRestartKeepsUnreachable(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	createNode(t, s.Client, "gone")
	startHeartbeat(t, s.Client, "gone").stop()
	stop := startController(t, s.Client)
	testapi.Eventually(t, timeout, "node marked", func() bool {
		return readyOf(getNode(t, s.Client, "gone")).Status == corev1.ConditionUnknown
	})
	stop()

	w, err := s.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: getNode(t, s.Client, "gone").ResourceVersion})
	if err != nil {
		t.Fatalf("watch nodes: %v", err)
	}
	defer w.Stop()
	startController(t, s.Client)
	end := time.After(grace + time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if n, ok := ev.Object.(*corev1.Node); ok && (readyOf(n).Status != corev1.ConditionUnknown || unreachableTaintCount(n) != 2) {
				t.Fatalf("after restart node became Ready=%s with %d taints; want it to stay unreachable", readyOf(n).Status, unreachableTaintCount(n))
			}
		case <-end:
			return
		}
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o != DefaultOptions() {
		t.Errorf("zero options = %+v, %v; want defaults %+v", o, err, DefaultOptions())
	}
	for _, tc := range []struct {
		o    Options
		flag string
	}{
		{Options{NodeMonitorGracePeriod: -time.Second}, "--node-monitor-grace-period"},
		{Options{NodeMonitorPeriod: -time.Second}, "--node-monitor-period"},
		{Options{NodeMonitorGracePeriod: time.Second, NodeMonitorPeriod: 2 * time.Second}, "--node-monitor-period"},
	} {
		if err := tc.o.Validate(); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: err %v, want one naming %s", tc.o, err, tc.flag)
		}
	}
}

// TestEvictionAfterToleration: on an unreachable node, a pod is deleted
// once its toleration of the unreachable NoExecute taint runs out (counted
// from the taint's timeAdded); a pod tolerating the taint without a limit,
// one with the API server's default 300 s and the pods of a healthy node
// stay; a pod tolerating nothing goes at once.
func TestEvictionAfterToleration(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	for _, n := range []string{"alive", "dying"} {
		createNode(t, s.Client, n)
	}
	startHeartbeat(t, s.Client, "alive")
	dying := startHeartbeat(t, s.Client, "dying")
	unreachable := func(seconds *int64, op corev1.TolerationOperator) []corev1.Toleration {
		return []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: op, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}}
	}
	three := int64(3)
	createTolerantPod(t, s.Client, "short", "dying", unreachable(&three, corev1.TolerationOpExists))
	createTolerantPod(t, s.Client, "forever", "dying", unreachable(nil, corev1.TolerationOpExists))
	// Tolerating only another taint: the admission still adds the default
	// 300 s for unreachable, so this one stays too.
	createTolerantPod(t, s.Client, "default", "dying", []corev1.Toleration{{Key: "example.com/other", Operator: corev1.TolerationOpExists}})
	createTolerantPod(t, s.Client, "short-on-alive", "alive", unreachable(&three, corev1.TolerationOpExists))
	startController(t, s.Client)

	dying.stop()
	testapi.Eventually(t, timeout, "unreachable taints", func() bool { return unreachableTaintCount(getNode(t, s.Client, "dying")) == 2 })
	var added time.Time
	for _, taint := range getNode(t, s.Client, "dying").Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoExecute {
			added = taint.TimeAdded.Time
		}
	}
	gone := func(name string) bool {
		p, err := s.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
	}
	// A pod created after the taint with nothing tolerating it: the
	// admission adds the default tolerations only for pods that do not
	// name the key, so an Equal toleration with another value than the
	// taint's leaves it tolerating nothing.
	intolerant := unreachable(nil, corev1.TolerationOpEqual)
	intolerant[0].Value = "another-value"
	createTolerantPod(t, s.Client, "intolerant", "dying", intolerant)
	testapi.Eventually(t, timeout, "pod intolerant evicted", func() bool { return gone("intolerant") })
	testapi.Eventually(t, timeout, "pod short evicted", func() bool { return gone("short") })
	// timeAdded has second precision: the eviction is due between 3 s and
	// 4 s after the recorded time.
	if took := time.Since(added); took < 3*time.Second {
		t.Errorf("pod short evicted %v after the taint, before its 3 s toleration", took)
	}
	time.Sleep(time.Second)
	for _, name := range []string{"forever", "default", "short-on-alive"} {
		if gone(name) {
			t.Errorf("pod %s evicted", name)
		}
	}
}
