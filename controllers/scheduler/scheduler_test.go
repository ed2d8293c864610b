package scheduler

import (
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/testapi"
)

func TestSpreadsEvenly(t *testing.T) {
	s := testapi.Start(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		createNode(t, s.Client, n)
	}
	// Half the pods wait for the scheduler to start (one big burst from
	// the initial list), half arrive concurrently while it runs.
	for i := range 15 {
		createPod(t, s.Client, fmt.Sprintf("early-%d", i))
	}
	startScheduler(t, s.Client, Options{})
	var wg sync.WaitGroup
	for i := range 15 {
		wg.Go(func() { createPod(t, s.Client, fmt.Sprintf("late-%d", i)) })
	}
	wg.Wait()

	perNode := map[string]int{}
	for _, prefix := range []string{"early", "late"} {
		for i := range 15 {
			name := fmt.Sprintf("%s-%d", prefix, i)
			perNode[waitBound(t, s.Client, name)]++
			scheduled := false
			for _, c := range getPod(t, s.Client, name).Status.Conditions {
				scheduled = scheduled || (c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue)
			}
			if !scheduled {
				t.Errorf("pod %s bound without PodScheduled=True", name)
			}
		}
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if perNode[n] != 10 {
			t.Errorf("pods per node = %v, want 10 on each", perNode)
			break
		}
	}
	if evs := podEvents(t, s.Client, "early-0", ReasonScheduled); len(evs) == 0 {
		testapi.Eventually(t, timeout, "Scheduled event", func() bool {
			return len(podEvents(t, s.Client, "early-0", ReasonScheduled)) > 0
		})
	}
}

func TestNodeSelectorAndAffinity(t *testing.T) {
	s := testapi.Start(t)
	createNode(t, s.Client, "a1", labeled("zone", "a", "disk", "ssd"))
	createNode(t, s.Client, "a2", labeled("zone", "a"))
	createNode(t, s.Client, "b1", labeled("zone", "b", "gen", "5"))
	startScheduler(t, s.Client, Options{})

	for i := range 3 {
		createPod(t, s.Client, fmt.Sprintf("in-b-%d", i), selecting("zone", "b"))
	}
	createPod(t, s.Client, "ssd", selecting("zone", "a", "disk", "ssd"))
	createPod(t, s.Client, "newer-gen", func(p *corev1.Pod) {
		p.Spec.Affinity = requiredAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "gen", Operator: corev1.NodeSelectorOpGt, Values: []string{"4"}},
		}})
	})
	createPod(t, s.Client, "not-b", func(p *corev1.Pod) {
		p.Spec.Affinity = requiredAffinity(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"b"}}}},
		)
		p.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	})
	createPod(t, s.Client, "by-name", func(p *corev1.Pod) {
		p.Spec.Affinity = requiredAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"a2"}},
		}})
	})

	for i := range 3 {
		if n := waitBound(t, s.Client, fmt.Sprintf("in-b-%d", i)); n != "b1" {
			t.Errorf("pod in-b-%d on %s, want b1 (the only zone=b node)", i, n)
		}
	}
	for pod, want := range map[string]string{"ssd": "a1", "newer-gen": "b1", "not-b": "a1", "by-name": "a2"} {
		if n := waitBound(t, s.Client, pod); n != want {
			t.Errorf("pod %s on %s, want %s", pod, n, want)
		}
	}
}

func requiredAffinity(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

func TestTaintsAndTolerations(t *testing.T) {
	s := testapi.Start(t)
	createNode(t, s.Client, "plain", tainted("soft", "", corev1.TaintEffectPreferNoSchedule))
	createNode(t, s.Client, "db", tainted("dedicated", "db", corev1.TaintEffectNoSchedule))
	// Not the unreachable taint: the API server gives every pod a default
	// toleration for unreachable:NoExecute (as kube-apiserver does).
	createNode(t, s.Client, "gone", tainted("maintenance", "", corev1.TaintEffectNoExecute))
	startScheduler(t, s.Client, Options{})

	// Untolerating pods all go to the only untainted node (PreferNoSchedule
	// is a preference), although it fills up.
	for i := range 4 {
		createPod(t, s.Client, fmt.Sprintf("plain-%d", i))
	}
	for i := range 4 {
		if n := waitBound(t, s.Client, fmt.Sprintf("plain-%d", i)); n != "plain" {
			t.Errorf("pod plain-%d on %s, want plain", i, n)
		}
	}
	// A matching toleration makes the tainted, emptier node the choice;
	// a toleration with the wrong value does not.
	createPod(t, s.Client, "db-client", tolerating(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}))
	if n := waitBound(t, s.Client, "db-client"); n != "db" {
		t.Errorf("tolerating pod on %s, want db", n)
	}
	createPod(t, s.Client, "wrong-value", tolerating(corev1.Toleration{Key: "dedicated", Value: "web"}))
	if n := waitBound(t, s.Client, "wrong-value"); n != "plain" {
		t.Errorf("pod tolerating dedicated=web on %s, want plain", n)
	}
	// Exists without a key tolerates everything: the emptiest node wins.
	createPod(t, s.Client, "anything", tolerating(corev1.Toleration{Operator: corev1.TolerationOpExists}))
	if n := waitBound(t, s.Client, "anything"); n != "gone" {
		t.Errorf("pod tolerating everything on %s, want gone (fewest pods)", n)
	}
}

func TestAvoidsNotReadyAndUnschedulable(t *testing.T) {
	s := testapi.Start(t)
	createNode(t, s.Client, "ready")
	createNode(t, s.Client, "not-ready", readiness(corev1.ConditionFalse))
	createNode(t, s.Client, "unknown", readiness(corev1.ConditionUnknown))
	createNode(t, s.Client, "no-status", readiness(""))
	createNode(t, s.Client, "cordoned", cordoned)
	startScheduler(t, s.Client, Options{})

	for i := range 4 {
		createPod(t, s.Client, fmt.Sprintf("p%d", i))
	}
	for i := range 4 {
		if n := waitBound(t, s.Client, fmt.Sprintf("p%d", i)); n != "ready" {
			t.Errorf("pod p%d on %s, want ready", i, n)
		}
	}
	createPod(t, s.Client, "drainer", tolerating(corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}))
	if n := waitBound(t, s.Client, "drainer"); n != "cordoned" {
		t.Errorf("pod tolerating unschedulable on %s, want cordoned (fewest pods)", n)
	}
}

func TestUnschedulableUntilNodeFits(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	createNode(t, s.Client, "web", labeled("role", "web"))
	createNode(t, s.Client, "db", labeled("role", "db"), tainted("dedicated", "db", corev1.TaintEffectNoSchedule))
	createNode(t, s.Client, "down", labeled("role", "db"), readiness(corev1.ConditionFalse))
	startScheduler(t, s.Client, Options{})

	createPod(t, s.Client, "needs-db", selecting("role", "db"))
	waitFailedScheduling(t, s.Client, "needs-db",
		"0/3 nodes are available: ",
		"1 node(s) didn't match Pod's node affinity/selector",
		"1 node(s) had untolerated taint {dedicated: db}",
		"1 node(s) were not ready")
	stillUnbound(t, s.Client, "needs-db")

	// A fitting node appears: the pod is retried and bound.
	createNode(t, s.Client, "db2", labeled("role", "db"))
	if n := waitBound(t, s.Client, "needs-db"); n != "db2" {
		t.Errorf("pod on %s, want db2", n)
	}

	// An existing node changing to fit works too.
	createPod(t, s.Client, "needs-cache", selecting("role", "cache"))
	waitFailedScheduling(t, s.Client, "needs-cache", "0/4 nodes are available: ", "3 node(s) didn't match")
	node, err := s.Client.CoreV1().Nodes().Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	node.Labels["role"] = "cache"
	if _, err := s.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("relabel node: %v", err)
	}
	if n := waitBound(t, s.Client, "needs-cache"); n != "web" {
		t.Errorf("pod on %s, want web", n)
	}
}

func TestNoNodes(t *testing.T) {
	s := testapi.Start(t)
	startScheduler(t, s.Client, Options{})
	createPod(t, s.Client, "lonely")
	waitFailedScheduling(t, s.Client, "lonely", "0/0 nodes are available")
	createNode(t, s.Client, "first")
	if n := waitBound(t, s.Client, "lonely"); n != "first" {
		t.Errorf("pod on %s, want first", n)
	}
}

func TestLeavesOthersAlone(t *testing.T) {
	s := testapi.Start(t)
	createNode(t, s.Client, "n1")
	createNode(t, s.Client, "n2")
	startScheduler(t, s.Client, Options{SchedulerName: "nodenet"})

	// Pre-bound at create, even to a node that does not exist.
	createPod(t, s.Client, "pre-bound", func(p *corev1.Pod) { p.Spec.NodeName = "elsewhere"; p.Spec.SchedulerName = "nodenet" })
	createPod(t, s.Client, "other-scheduler") // default-scheduler is not us
	createPod(t, s.Client, "ours", func(p *corev1.Pod) { p.Spec.SchedulerName = "nodenet" })

	waitBound(t, s.Client, "ours")
	stillUnbound(t, s.Client, "other-scheduler")
	p := getPod(t, s.Client, "pre-bound")
	if p.Spec.NodeName != "elsewhere" {
		t.Errorf("pre-bound pod moved to %s", p.Spec.NodeName)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			t.Errorf("pre-bound pod got PodScheduled=False: %s", c.Message)
		}
	}
	for _, name := range []string{"pre-bound", "other-scheduler"} {
		if evs := podEvents(t, s.Client, name, ReasonFailedScheduling); len(evs) > 0 {
			t.Errorf("pod %s got FailedScheduling: %s", name, evs[0].Message)
		}
	}
}
