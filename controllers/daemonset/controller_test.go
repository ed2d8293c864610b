package daemonset

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"sigs.k8s.io/yaml"

	"github.com/nodenet/nodenet/internal/testapi"
)

// TestPodPerNode: one pod on every node the template may run on — the
// nodeSelector matches, every NoSchedule/NoExecute taint is tolerated —
// labelled, owned, bound and tolerating what a daemon must; the status
// counts them.
func TestPodPerNode(t *testing.T) {
	e := start(t)
	e.createNode("n1", labeled("role", "net"))
	e.createNode("n2", labeled("role", "net"), tainted("dedicated", corev1.TaintEffectNoSchedule))
	e.createNode("n3", labeled("role", "storage"))
	e.createNode("n4", labeled("role", "net"), tainted(corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute),
		tainted(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule), tainted("soft", corev1.TaintEffectPreferNoSchedule))
	e.createNode("n5", labeled("role", "net"), tainted(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule))
	ds := e.createDaemonSet("net", onNodesLabeled("role", "net"))

	e.waitNodes("net", "daemon:1", "n1", "n4", "n5")
	e.waitStatus("net", "3 of 3 rolled out", rolledOut(3))

	revs := e.revisions("net")
	if len(revs) != 1 || revs[0].Revision != 1 || !metav1.IsControlledBy(&revs[0], ds) {
		t.Fatalf("revisions = %+v, want one, revision 1, controlled by the daemonset", revs)
	}
	hash := revs[0].Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
	for _, p := range e.pods("net") {
		if !metav1.IsControlledBy(p, ds) || p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != hash ||
			p.Labels[templateGenerationLabel] != "1" || p.Labels["app"] != "net" || p.GenerateName != "net-" {
			t.Errorf("pod %s: owners %v labels %v", p.Name, p.OwnerReferences, p.Labels)
		}
		for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeDiskPressure, corev1.TaintNodeMemoryPressure,
			corev1.TaintNodePIDPressure, corev1.TaintNodeUnschedulable, corev1.TaintNodeNetworkUnavailable} {
			if !slices.ContainsFunc(p.Spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == key }) {
				t.Errorf("pod %s does not tolerate %s: %v", p.Name, key, p.Spec.Tolerations)
			}
		}
	}
	if evs := e.events("net", reasonCreated); len(evs) == 0 {
		t.Errorf("no %s events", reasonCreated)
	}

	// Tolerating the taint brings n2 in (a template change: rolled too).
	patch := `{"spec":{"template":{"spec":{"tolerations":[{"key":"dedicated","operator":"Exists"}]}}}}`
	if _, err := e.client.AppsV1().DaemonSets(ns).Patch(e.ctx(), "net", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitNodes("net", "daemon:1", "n1", "n2", "n4", "n5")
	e.waitStatus("net", "4 of 4 rolled out", rolledOut(4))

	// A NoExecute taint the pod does not tolerate removes its pod; a
	// NoSchedule one leaves the running pod alone (but it is misscheduled).
	for name, effect := range map[string]corev1.TaintEffect{"n1": corev1.TaintEffectNoExecute, "n5": corev1.TaintEffectNoSchedule} {
		n, err := e.client.CoreV1().Nodes().Get(e.ctx(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "evict", Effect: effect})
		if _, err := e.client.CoreV1().Nodes().Update(e.ctx(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitNodes("net", "daemon:1", "n2", "n4", "n5")
	e.waitStatus("net", "3 desired, 1 misscheduled", func(s appsv1.DaemonSetStatus) bool {
		return s.DesiredNumberScheduled == 2 && s.NumberMisscheduled == 1 && s.NumberAvailable == 2
	})
}

// TestNodesComeAndGo: a new node gets its pod; a node that is deleted
// loses it (at once: no agent is left to finish a graceful deletion).
func TestNodesComeAndGo(t *testing.T) {
	e := start(t)
	e.createNode("n1")
	e.createDaemonSet("agent")
	e.waitNodes("agent", "daemon:1", "n1")
	e.createNode("n2")
	e.waitNodes("agent", "daemon:1", "n1", "n2")
	e.waitStatus("agent", "2 rolled out", rolledOut(2))

	e.kubelet.stop("n1") // a node that is gone has no agent to finish a deletion
	if err := e.client.CoreV1().Nodes().Delete(e.ctx(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, timeout, "the pod of the deleted node gone", func() bool { return len(e.podsOn("n1")) == 0 })
	e.waitNodes("agent", "daemon:1", "n2")
	e.waitStatus("agent", "1 rolled out", rolledOut(1))
}

// TestPodsReplaced: a deleted pod comes back; so does a failed one (with a
// FailedDaemonPod event); an orphan that matches is adopted instead of
// getting a twin.
func TestPodsReplaced(t *testing.T) {
	e := start(t)
	e.createNode("n1")
	e.createNode("n2")
	e.createDaemonSet("agent")
	e.waitNodes("agent", "daemon:1", "n1", "n2")
	e.waitStatus("agent", "2 rolled out", rolledOut(2))

	first := e.nodesOf("agent")["n1"][0]
	if err := e.client.CoreV1().Pods(ns).Delete(e.ctx(), first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, timeout, "a new pod on n1", func() bool {
		pods := e.nodesOf("agent")["n1"]
		return len(pods) == 1 && pods[0].UID != first.UID && ready(pods[0])
	})

	failed := e.nodesOf("agent")["n2"][0].DeepCopy()
	failed.Status.Phase = corev1.PodFailed
	if _, err := e.client.CoreV1().Pods(ns).UpdateStatus(e.ctx(), failed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, timeout, "the failed pod on n2 replaced", func() bool {
		pods := e.nodesOf("agent")["n2"]
		return len(pods) == 1 && pods[0].UID != failed.UID && ready(pods[0])
	})
	if len(e.events("agent", reasonFailedPod)) == 0 {
		t.Errorf("no %s event", reasonFailedPod)
	}

	// A pod relabelled out of the selector is released (no longer owned)
	// and its node gets a new one.
	moved := e.nodesOf("agent")["n1"][0]
	if _, err := e.client.CoreV1().Pods(ns).Patch(e.ctx(), moved.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"debug"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, timeout, "the relabelled pod released and replaced", func() bool {
		p, err := e.client.CoreV1().Pods(ns).Get(e.ctx(), moved.Name, metav1.GetOptions{})
		pods := e.nodesOf("agent")["n1"]
		return err == nil && metav1.GetControllerOf(p) == nil && len(pods) == 1 && ready(pods[0])
	})

	// An orphan that matches, made from the current template (a DaemonSet
	// deleted with --cascade=orphan elsewhere and recreated, say): adopted,
	// and no second pod is started beside it. Its node keeps the
	// DaemonSet's own pods away until the orphan is there.
	e.createNode("n3", tainted("not-yet", corev1.TaintEffectNoSchedule))
	hash := e.revisions("agent")[0].Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: ns, Labels: map[string]string{"app": "agent", appsv1.DefaultDaemonSetUniqueLabelKey: hash}},
		Spec:       corev1.PodSpec{NodeName: "n3", Containers: []corev1.Container{{Name: "daemon", Image: "daemon:1"}}},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(e.ctx(), orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds := e.getDaemonSet("agent")
	testapi.Eventually(t, timeout, "the orphan adopted", func() bool {
		p, err := e.client.CoreV1().Pods(ns).Get(e.ctx(), "stray", metav1.GetOptions{})
		return err == nil && metav1.IsControlledBy(p, ds)
	})
	n3, err := e.client.CoreV1().Nodes().Get(e.ctx(), "n3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n3.Spec.Taints = nil
	if _, err := e.client.CoreV1().Nodes().Update(e.ctx(), n3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("agent", "3 rolled out", rolledOut(3))
	e.waitNodes("agent", "daemon:1", "n1", "n2", "n3")
	if pods := e.nodesOf("agent")["n3"]; len(pods) != 1 || pods[0].Name != "stray" {
		t.Errorf("pods on n3: %v, want the adopted orphan only", pods)
	}
}

// unavailabilityWatch follows the pods of a DaemonSet through an informer
// (every change, in order) and records the largest number of the given
// nodes that at some moment had no Ready pod.
type unavailabilityWatch struct {
	mu     sync.Mutex
	nodes  []string
	pods   map[types.UID]*corev1.Pod
	worst  int
	synced bool
}

func watchUnavailability(e *env, name string, nodes ...string) *unavailabilityWatch {
	w := &unavailabilityWatch{nodes: nodes, pods: map[types.UID]*corev1.Pod{}}
	factory := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=" + name }))
	inf := factory.Core().V1().Pods().Informer()
	set := func(obj any) {
		p := obj.(*corev1.Pod)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.pods[p.UID] = p
		w.measure()
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(w.pods, obj.(*corev1.Pod).UID)
			w.measure()
		},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	e.t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	// The registration has synced once the handler has seen the whole
	// initial list.
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		e.t.Fatal("pod informer not synced")
	}
	w.mu.Lock()
	w.synced = true
	w.measure()
	w.mu.Unlock()
	return w
}

func (w *unavailabilityWatch) measure() {
	if !w.synced {
		return // the initial list arrives one pod at a time
	}
	down := 0
	for _, n := range w.nodes {
		up := false
		for _, p := range w.pods {
			up = up || (p.Spec.NodeName == n && p.DeletionTimestamp == nil && ready(p))
		}
		if !up {
			down++
		}
	}
	w.worst = max(w.worst, down)
}

func (w *unavailabilityWatch) max() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.worst
}

// TestRollingUpdate: a template change replaces the pods one node at a
// time with maxUnavailable 1 — a node's new pod must be Ready before the
// next old one goes, and the new one starts only once the old one is
// gone. A rollout restart (the annotation kubectl sets) rolls every pod.
// Revisions beyond the history limit are pruned.
func TestRollingUpdate(t *testing.T) {
	e := start(t)
	nodes := []string{"n1", "n2", "n3", "n4"}
	for _, n := range nodes {
		e.createNode(n)
	}
	e.createDaemonSet("agent", historyLimit(1))
	e.waitNodes("agent", "daemon:1", nodes...)
	e.waitStatus("agent", "4 rolled out", rolledOut(4))
	w := watchUnavailability(e, "agent", nodes...)

	// Hold back readiness everywhere, so the first replaced node's new pod
	// stays unready: the status written after its creation comes from a
	// sync that saw it, and that sync must not have touched another node.
	for _, n := range nodes {
		e.kubelet.hold(n)
	}
	ds := e.setImage("agent", "daemon:2")
	if ds.Generation != 2 {
		t.Fatalf("generation after the template change = %d, want 2", ds.Generation)
	}
	st := e.waitStatus("agent", "one node updated, unready", func(s appsv1.DaemonSetStatus) bool {
		return s.UpdatedNumberScheduled == 1 && s.NumberUnavailable == 1
	})
	var updated []string
	for n, pods := range e.nodesOf("agent") {
		for _, p := range pods {
			if p.Spec.Containers[0].Image == "daemon:2" {
				updated = append(updated, n)
			}
		}
	}
	if len(updated) != 1 || st.NumberAvailable != 3 {
		t.Fatalf("while the first new pod is unready: updated nodes %v, status %+v; want one node, 3 available", updated, st)
	}
	for _, n := range nodes {
		e.release(n)
	}
	e.waitNodes("agent", "daemon:2", nodes...)
	e.waitStatus("agent", "4 rolled out", rolledOut(4))
	if worst := w.max(); worst != 1 {
		t.Errorf("at worst %d nodes had no ready pod during the rollout, want 1 (maxUnavailable)", worst)
	}

	// kubectl rollout restart.
	before := map[types.UID]bool{}
	for _, p := range e.pods("agent") {
		before[p.UID] = true
	}
	restart := `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-01-01T00:00:00Z"}}}}}`
	if _, err := e.client.AppsV1().DaemonSets(ns).Patch(e.ctx(), "agent", types.StrategicMergePatchType, []byte(restart), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("agent", "4 rolled out after restart", rolledOut(4))
	e.waitNodes("agent", "daemon:2", nodes...)
	for _, p := range e.pods("agent") {
		if before[p.UID] || p.Annotations["kubectl.kubernetes.io/restartedAt"] == "" || p.Labels[templateGenerationLabel] != "3" {
			t.Errorf("pod %s after restart: old %v, annotations %v, labels %v", p.Name, before[p.UID], p.Annotations, p.Labels)
		}
	}
	if worst := w.max(); worst != 1 {
		t.Errorf("at worst %d nodes had no ready pod, want 1", worst)
	}

	// Three templates, a history of one: the current and one old revision.
	testapi.Eventually(t, timeout, "revisions pruned to the current and one old", func() bool {
		revs := e.revisions("agent")
		if len(revs) != 2 {
			return false
		}
		nums := []int64{revs[0].Revision, revs[1].Revision}
		slices.Sort(nums)
		return slices.Equal(nums, []int64{2, 3})
	})
}

// TestMaxSurge: with maxSurge the new pod starts beside the old one, which
// goes once the new one is ready.
func TestMaxSurge(t *testing.T) {
	e := start(t)
	e.createNode("n1")
	e.createNode("n2")
	e.createDaemonSet("agent", func(ds *appsv1.DaemonSet) {
		zero, one := intstrInt(0), intstrInt(1)
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &one}
	})
	e.waitStatus("agent", "2 rolled out", rolledOut(2))
	w := watchUnavailability(e, "agent", "n1", "n2")
	e.kubelet.hold("n1")
	e.kubelet.hold("n2")
	e.setImage("agent", "daemon:2")
	testapi.Eventually(t, timeout, "a new pod beside an old one", func() bool {
		for _, pods := range e.nodesOf("agent") {
			if len(pods) == 2 {
				return true
			}
		}
		return false
	})
	e.release("n1")
	e.release("n2")
	e.waitNodes("agent", "daemon:2", "n1", "n2")
	e.waitStatus("agent", "2 rolled out", rolledOut(2))
	if worst := w.max(); worst != 0 {
		t.Errorf("at worst %d nodes had no ready pod during a surge rollout, want 0", worst)
	}
}

// TestOnDelete: a template change replaces nothing until a pod is deleted.
func TestOnDelete(t *testing.T) {
	e := start(t)
	e.createNode("n1")
	e.createNode("n2")
	e.createDaemonSet("agent", onDelete)
	e.waitStatus("agent", "2 rolled out", rolledOut(2))
	e.setImage("agent", "daemon:2")
	e.waitStatus("agent", "new generation observed, nothing updated", func(s appsv1.DaemonSetStatus) bool {
		return s.UpdatedNumberScheduled == 0 && s.NumberAvailable == 2
	})
	old := e.nodesOf("agent")["n1"][0]
	if err := e.client.CoreV1().Pods(ns).Delete(e.ctx(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("agent", "the deleted pod replaced from the new template", func(s appsv1.DaemonSetStatus) bool {
		return s.UpdatedNumberScheduled == 1 && s.NumberAvailable == 2
	})
	if img := e.nodesOf("agent")["n2"][0].Spec.Containers[0].Image; img != "daemon:1" {
		t.Errorf("n2 runs %s, want the old daemon:1 (OnDelete)", img)
	}
}

// TestDaemonSetDeleted: with no garbage collector in the API server, the
// controller removes the pods and revisions of a deleted DaemonSet, and of
// one replaced by another of the same name.
func TestDaemonSetDeleted(t *testing.T) {
	e := start(t)
	e.createNode("n1")
	e.createDaemonSet("agent")
	e.waitStatus("agent", "1 rolled out", rolledOut(1))
	old := e.pods("agent")[0]
	if err := e.client.AppsV1().DaemonSets(ns).Delete(e.ctx(), "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Recreated at once: the old pod belongs to the old DaemonSet.
	ds := e.createDaemonSet("agent")
	testapi.Eventually(t, timeout, "the old pod replaced by the new daemonset's", func() bool {
		pods := e.nodesOf("agent")["n1"]
		return len(pods) == 1 && pods[0].UID != old.UID && metav1.IsControlledBy(pods[0], ds)
	})
	if err := e.client.AppsV1().DaemonSets(ns).Delete(e.ctx(), "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, timeout, "pods and revisions gone", func() bool {
		return len(e.pods("agent")) == 0 && len(e.revisions("agent")) == 0
	})
	if _, err := e.client.AppsV1().DaemonSets(ns).Get(e.ctx(), "agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("daemonset after delete: %v", err)
	}
}

// TestNodenetManifest: the DaemonSet users apply (daemonset/nodenet.yaml)
// runs on every node, tainted ones included (it tolerates everything),
// and rolls on a restart.
func TestNodenetManifest(t *testing.T) {
	e := start(t)
	data, err := os.ReadFile("../../daemonset/nodenet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds *appsv1.DaemonSet
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var probe metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			t.Fatal(err)
		}
		if probe.Kind == "DaemonSet" {
			ds = &appsv1.DaemonSet{}
			if err := yaml.UnmarshalStrict([]byte(doc), ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet in daemonset/nodenet.yaml")
	}
	if _, err := e.client.CoreV1().Namespaces().Create(e.ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ds.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createNode("n1")
	e.createNode("n2", tainted("dedicated", corev1.TaintEffectNoExecute), tainted(corev1.TaintNodeNetworkUnavailable, corev1.TaintEffectNoSchedule))
	dsc := e.client.AppsV1().DaemonSets(ds.Namespace)
	if _, err := dsc.Create(e.ctx(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := rolledOut(2)
	wait := func(what string) {
		t.Helper()
		testapi.Eventually(t, timeout, what, func() bool {
			cur, err := dsc.Get(e.ctx(), ds.Name, metav1.GetOptions{})
			return err == nil && cur.Status.ObservedGeneration == cur.Generation && done(cur.Status)
		})
	}
	wait("nodenet on both nodes")
	restart := `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-01-01T00:00:00Z"}}}}}`
	if _, err := dsc.Patch(e.ctx(), ds.Name, types.StrategicMergePatchType, []byte(restart), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("nodenet restarted on both nodes")
	pods, err := e.client.CoreV1().Pods(ds.Namespace).List(e.ctx(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			nodes = append(nodes, p.Spec.NodeName)
			if !p.Spec.HostNetwork || p.Annotations["kubectl.kubernetes.io/restartedAt"] == "" || len(p.Spec.InitContainers) != 1 {
				t.Errorf("pod %s: hostNetwork %v annotations %v init containers %d", p.Name, p.Spec.HostNetwork, p.Annotations, len(p.Spec.InitContainers))
			}
		}
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, []string{"n1", "n2"}) {
		t.Errorf("nodenet pods on %v, want one on n1 and n2", nodes)
	}
}
