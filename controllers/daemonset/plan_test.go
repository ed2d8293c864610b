package daemonset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func daemonSet(mutate ...func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ds", Namespace: "ns", UID: "ds-uid", Generation: 4,
			Annotations: map[string]string{appsv1.DeprecatedTemplateGeneration: "2"}},
		Spec: appsv1.DaemonSetSpec{
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}, Annotations: map[string]string{"a": "b"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &one, MaxSurge: &zero}},
		},
	}
	for _, m := range mutate {
		m(ds)
	}
	return ds
}

func node(name string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "a"}}, Spec: corev1.NodeSpec{Taints: taints}}
}

func TestPlacement(t *testing.T) {
	taint := func(key string, effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: key, Effect: effect}
	}
	plain := daemonSet()
	hostNet := daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.HostNetwork = true })
	tolerant := daemonSet(func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	})
	zoneB := daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "b"} })
	pinned := daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeName = "other" })
	affinity := daemonSet(func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n"}}},
			}}},
		}}
	})
	for _, tc := range []struct {
		name      string
		ds        *appsv1.DaemonSet
		node      *corev1.Node
		run, keep bool
	}{
		{"plain node", plain, node("n"), true, true},
		{"cordoned and sick nodes are tolerated", plain, node("n", taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule),
			taint(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute), taint(corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute),
			taint(corev1.TaintNodeDiskPressure, corev1.TaintEffectNoSchedule), taint(corev1.TaintNodeMemoryPressure, corev1.TaintEffectNoSchedule),
			taint(corev1.TaintNodePIDPressure, corev1.TaintEffectNoSchedule)), true, true},
		{"network-unavailable only for host-network pods", plain, node("n", taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), false, true},
		{"network-unavailable with hostNetwork", hostNet, node("n", taint(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule)), true, true},
		{"NoSchedule keeps new pods away", plain, node("n", taint("x", corev1.TaintEffectNoSchedule)), false, true},
		{"NoExecute evicts", plain, node("n", taint("x", corev1.TaintEffectNoExecute)), false, false},
		{"PreferNoSchedule is a preference", plain, node("n", taint("x", corev1.TaintEffectPreferNoSchedule)), true, true},
		{"tolerate everything", tolerant, node("n", taint("x", corev1.TaintEffectNoExecute), taint("y", corev1.TaintEffectNoSchedule)), true, true},
		{"nodeSelector", zoneB, node("n"), false, false},
		{"template nodeName", pinned, node("n"), false, false},
		{"required node affinity", affinity, node("n"), true, true},
		{"required node affinity, other node", affinity, node("m"), false, false},
	} {
		run, keep := placement(tc.ds, tc.node)
		if run != tc.run || keep != tc.keep {
			t.Errorf("%s: run=%v keep=%v, want run=%v keep=%v", tc.name, run, keep, tc.run, tc.keep)
		}
	}
}

func TestNewPod(t *testing.T) {
	ds := daemonSet(func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.HostNetwork = true
		ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	})
	p := newPod(ds, "n1", "abc")
	if p.Spec.NodeName != "n1" || p.GenerateName != "ds-" || p.Namespace != "ns" {
		t.Errorf("pod %s/%s* on %q", p.Namespace, p.GenerateName, p.Spec.NodeName)
	}
	want := map[string]string{"app": "d", appsv1.DefaultDaemonSetUniqueLabelKey: "abc", templateGenerationLabel: "2"}
	if fmt.Sprint(p.Labels) != fmt.Sprint(want) || p.Annotations["a"] != "b" {
		t.Errorf("labels %v annotations %v, want labels %v", p.Labels, p.Annotations, want)
	}
	if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != ds.UID || ref.Kind != "DaemonSet" || ref.APIVersion != "apps/v1" {
		t.Errorf("controller %+v", ref)
	}
	// The template's own not-ready toleration is not doubled; the others
	// and network-unavailable (hostNetwork) are added.
	count := map[string]int{}
	for _, tol := range p.Spec.Tolerations {
		count[tol.Key]++
	}
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeDiskPressure,
		corev1.TaintNodeMemoryPressure, corev1.TaintNodePIDPressure, corev1.TaintNodeUnschedulable, corev1.TaintNodeNetworkUnavailable} {
		if count[key] != 1 {
			t.Errorf("toleration %s: %d times, want 1", key, count[key])
		}
	}
	if len(ds.Spec.Template.Spec.Tolerations) != 1 {
		t.Errorf("the template was changed: %v", ds.Spec.Template.Spec.Tolerations)
	}
}

// pod makes a pod on a node: updated (the current hash) or old, ready
// since some seconds before now or not ready (readyFor < 0).
type podState struct {
	name     string
	updated  bool
	readyFor time.Duration // < 0: not ready
	deleting bool
	phase    corev1.PodPhase
	age      int
}

func mkPod(node string, s podState) *corev1.Pod {
	hash := "old"
	if s.updated {
		hash = "new"
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: s.name, UID: types.UID(s.name), Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: hash},
		CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(s.age) * time.Second)),
	}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if s.phase != "" {
		p.Status.Phase = s.phase
	}
	if s.readyFor >= 0 {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(time.Hour - s.readyFor))}}
	}
	if s.deleting {
		p.DeletionTimestamp = &metav1.Time{Time: t0}
	}
	return p
}

const notReady = -1

func view(name string, pods ...podState) *nodeView {
	v := &nodeView{name: name, run: true, keep: true, exists: true}
	for _, s := range pods {
		v.pods = append(v.pods, mkPod(name, s))
	}
	return v
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func testPlanner(ds *appsv1.DaemonSet, desired int) *planner {
	return newPlanner(ds, "new", desired, t0.Add(time.Hour), func(string) bool { return true })
}

func TestUpkeep(t *testing.T) {
	pl := testPlanner(daemonSet(onDelete), 0)
	gone := view("gone", podState{name: "g1"}, podState{name: "g2", deleting: true})
	gone.exists, gone.run, gone.keep = false, false, false
	evicted := view("evicted", podState{name: "e1"}, podState{name: "e2", deleting: true})
	evicted.run, evicted.keep = false, false
	tainted := view("tainted", podState{name: "t1"})
	tainted.run = false
	p := pl.plan([]*nodeView{
		view("empty"),
		view("stopping", podState{name: "s1", deleting: true}),
		view("two", podState{name: "old", age: 1}, podState{name: "young", age: 2}),
		view("failed", podState{name: "f1", phase: corev1.PodFailed}),
		view("done", podState{name: "d1", phase: corev1.PodSucceeded}),
		gone, evicted, tainted,
	})
	if !slices.Equal(p.create, []string{"empty"}) {
		t.Errorf("create on %v, want [empty] (a stopping pod blocks its successor)", p.create)
	}
	if got, want := names(p.delete), []string{"d1", "e1", "f1", "g1", "g2", "young"}; !slices.Equal(got, want) {
		t.Errorf("delete %v, want %v", got, want)
	}
	if got := names(p.failed); !slices.Equal(got, []string{"f1"}) {
		t.Errorf("failed %v, want [f1]", got)
	}

	// A node in failure back-off keeps its failed pod for now.
	pl.mayReplaceFailed = func(string) bool { return false }
	p = pl.plan([]*nodeView{view("failed", podState{name: "f1", phase: corev1.PodFailed})})
	if len(p.delete) != 0 || !slices.Equal(p.backoff, []string{"failed"}) {
		t.Errorf("in back-off: delete %v backoff %v", names(p.delete), p.backoff)
	}
}

func TestRollingReplace(t *testing.T) {
	available := podState{readyFor: time.Minute}
	old := func(name string) podState { s := available; s.name = name; return s }
	upd := func(name string, readyFor time.Duration) podState {
		return podState{name: name, updated: true, readyFor: readyFor}
	}
	for _, tc := range []struct {
		name           string
		maxUnavailable intstr.IntOrString
		minReady       int32
		nodes          []*nodeView
		wantDelete     []string
	}{
		{"one at a time", intstr.FromInt32(1),
			0, []*nodeView{view("a", old("a")), view("b", old("b")), view("c", old("c"))}, []string{"a"}},
		{"a new pod not ready yet blocks", intstr.FromInt32(1),
			0, []*nodeView{view("a", upd("a", notReady)), view("b", old("b")), view("c", old("c"))}, nil},
		{"a node being replaced blocks", intstr.FromInt32(1),
			0, []*nodeView{view("a", podState{name: "a", deleting: true, readyFor: time.Minute}), view("b", old("b"))}, nil},
		{"an empty node blocks", intstr.FromInt32(1),
			0, []*nodeView{view("a"), view("b", old("b"))}, nil},
		{"ready but not for minReadySeconds blocks", intstr.FromInt32(1),
			30, []*nodeView{view("a", upd("a", 10*time.Second)), view("b", old("b"))}, nil},
		{"available after minReadySeconds", intstr.FromInt32(1),
			30, []*nodeView{view("a", upd("a", 40*time.Second)), view("b", old("b"))}, []string{"b"}},
		{"an unavailable old pod goes at once", intstr.FromInt32(1),
			0, []*nodeView{view("a", upd("a", notReady)), view("b", podState{name: "b", readyFor: notReady}), view("c", old("c"))}, []string{"b"}},
		{"two at a time", intstr.FromInt32(2),
			0, []*nodeView{view("a", old("a")), view("b", old("b")), view("c", old("c"))}, []string{"a", "b"}},
		{"50% of 4 rounds to 2", intstr.FromString("50%"),
			0, []*nodeView{view("a", old("a")), view("b", old("b")), view("c", old("c")), view("d", old("d"))}, []string{"a", "b"}},
		{"10% of 3 rounds up to 1", intstr.FromString("10%"),
			0, []*nodeView{view("a", old("a")), view("b", old("b")), view("c", old("c"))}, []string{"a"}},
		{"done", intstr.FromInt32(1),
			0, []*nodeView{view("a", upd("a", time.Minute)), view("b", upd("b", time.Minute))}, nil},
	} {
		ds := daemonSet(func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = &tc.maxUnavailable
			ds.Spec.MinReadySeconds = tc.minReady
		})
		p := testPlanner(ds, len(tc.nodes)).plan(tc.nodes)
		if got := names(p.delete); !slices.Equal(got, tc.wantDelete) {
			t.Errorf("%s: delete %v, want %v", tc.name, got, tc.wantDelete)
		}
		if len(p.create) != 0 && tc.name != "an empty node blocks" {
			t.Errorf("%s: create %v, want none (upkeep makes the replacement once the old pod is gone)", tc.name, p.create)
		}
	}
}

func TestRollingSurge(t *testing.T) {
	ds := daemonSet(func(ds *appsv1.DaemonSet) {
		zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &one}
	})
	pl := testPlanner(ds, 3)
	old := func(name string) podState { return podState{name: name, readyFor: time.Minute} }
	p := pl.plan([]*nodeView{view("a", old("a")), view("b", old("b")), view("c", old("c"))})
	if !slices.Equal(p.create, []string{"a"}) || len(p.delete) != 0 {
		t.Errorf("start: create %v delete %v, want a new pod on a only", p.create, names(p.delete))
	}
	p = pl.plan([]*nodeView{
		view("a", podState{name: "a-old", readyFor: time.Minute}, podState{name: "a-new", updated: true, readyFor: notReady, age: 1}),
		view("b", old("b")), view("c", old("c"))})
	if len(p.create) != 0 || len(p.delete) != 0 {
		t.Errorf("surging: create %v delete %v, want nothing until a's new pod is ready", p.create, names(p.delete))
	}
	p = pl.plan([]*nodeView{
		view("a", podState{name: "a-old", readyFor: time.Minute}, podState{name: "a-new", updated: true, readyFor: time.Minute, age: 1}),
		view("b", old("b")), view("c", old("c"))})
	if !slices.Equal(names(p.delete), []string{"a-old"}) || !slices.Equal(p.create, []string{"b"}) {
		t.Errorf("a done: create %v delete %v, want a-old deleted and b surged", p.create, names(p.delete))
	}
}

func TestStatus(t *testing.T) {
	ds := daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = 30 })
	misscheduled := view("m", podState{name: "m1", readyFor: time.Minute})
	misscheduled.run = false
	nodes := []*nodeView{
		view("a", podState{name: "a", updated: true, readyFor: time.Minute}),
		view("b", podState{name: "b", updated: true, readyFor: 10 * time.Second}), // ready, not yet available
		view("c", podState{name: "c", readyFor: time.Minute, deleting: true}),     // old, being replaced
		view("d", podState{name: "d", updated: true, readyFor: notReady}),         // starting
		view("e"), // no pod yet
		misscheduled,
	}
	pl := testPlanner(ds, 5)
	got := pl.status(ds, nodes)
	want := appsv1.DaemonSetStatus{ObservedGeneration: 4, DesiredNumberScheduled: 5, CurrentNumberScheduled: 4, NumberReady: 3,
		NumberAvailable: 2, UpdatedNumberScheduled: 3, NumberUnavailable: 3, NumberMisscheduled: 1}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("status\n got %+v\nwant %+v", got, want)
	}
	if wait := pl.nextAvailable(nodes); wait != 20*time.Second {
		t.Errorf("next available in %v, want 20s (b's minReadySeconds)", wait)
	}
}

func TestRevisionData(t *testing.T) {
	ds := daemonSet()
	a, err := revisionData(&ds.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	ds.Spec.Template.Spec.Containers[0].Image = "j"
	b, _ := revisionData(&ds.Spec.Template)
	if templateHash(a, nil) == templateHash(b, nil) {
		t.Error("two templates, one hash")
	}
	again, _ := revisionData(&daemonSet().Spec.Template)
	if templateHash(a, nil) != templateHash(again, nil) {
		t.Error("one template, two hashes")
	}
	one := int32(1)
	if templateHash(a, nil) == templateHash(a, &one) {
		t.Error("a collision count does not change the hash")
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, a, "", "  "); err != nil || !sameData(a, indented.Bytes()) {
		t.Errorf("reformatted data is not the same (%v)", err)
	}
	want := `{"spec":{"template":{"$patch":"replace","metadata":{"annotations":{"a":"b"},"labels":{"app":"d"}},"spec":{"containers":[{"image":"i","name":"c","resources":{}}]}}}}`
	if string(a) != want {
		t.Errorf("revision data\n got %s\nwant %s", a, want)
	}
}

func TestOnDeleteDoesNotRoll(t *testing.T) {
	pl := testPlanner(daemonSet(onDelete), 2)
	p := pl.plan([]*nodeView{view("a", podState{name: "a", readyFor: time.Minute}), view("b", podState{name: "b", readyFor: time.Minute})})
	if len(p.delete)+len(p.create) != 0 {
		t.Errorf("OnDelete: create %v delete %v, want nothing", p.create, names(p.delete))
	}
}
