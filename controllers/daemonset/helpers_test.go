package daemonset

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/internal/testapi"
)

const (
	timeout = 30 * time.Second
	ns      = "default"
)

// env is an API server with the controller running and a fake kubelet.
type env struct {
	t       *testing.T
	client  kubernetes.Interface
	kubelet *kubelet
}

func start(t *testing.T) *env {
	t.Helper()
	srv := testapi.Start(t)
	e := &env{t: t, client: srv.Client, kubelet: startKubelet(t, srv.Client)}
	testapi.RunController(t, srv.Client, "nodenet-daemonset", 2, func(f informers.SharedInformerFactory, r record.EventRecorder) (testapi.Runner, error) {
		return New(srv.Client, f, Options{}, r, testapi.Logger())
	})
	return e
}

func (e *env) ctx() context.Context { return testapi.Context(e.t) }

// kubelet plays the node agents: pods bound to a node start and turn Ready
// at once (unless the node is held), and terminating pods are removed, as
// a kubelet does once their containers stopped.
type kubelet struct {
	client kubernetes.Interface
	mu     sync.Mutex
	held   map[string]bool // pods start but do not turn Ready
	gone   map[string]bool // nothing happens to pods at all
	errs   []error         // failed writes, reported when the test ends
}

func (k *kubelet) fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.errs = append(k.errs, err)
}

func startKubelet(t *testing.T, client kubernetes.Interface) *kubelet {
	k := &kubelet{client: client, held: map[string]bool{}, gone: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.handle(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { k.handle(ctx, obj.(*corev1.Pod)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		for _, err := range k.errs {
			t.Errorf("kubelet: %v", err)
		}
	})
	return k
}

func (k *kubelet) handle(ctx context.Context, p *corev1.Pod) {
	k.mu.Lock()
	gone := k.gone[p.Spec.NodeName]
	k.mu.Unlock()
	switch {
	case gone:
	case p.DeletionTimestamp != nil:
		err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
			k.fail(fmt.Errorf("finish deleting %s: %w", p.Name, err))
		}
	case p.Spec.NodeName == "" || ready(p) || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
	case k.isHeld(p.Spec.NodeName):
		k.setStatus(ctx, p, false)
	default:
		k.setStatus(ctx, p, true)
	}
}

// setStatus marks a pod Running, Ready or not.
func (k *kubelet) setStatus(ctx context.Context, p *corev1.Pod, isReady bool) {
	if p.Status.Phase == corev1.PodRunning && ready(p) == isReady {
		return
	}
	p = p.DeepCopy()
	status := corev1.ConditionFalse
	if isReady {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	_, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		k.fail(fmt.Errorf("status of %s: %w", p.Name, err))
	}
}

func (k *kubelet) isHeld(node string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held[node]
}

// hold keeps new pods on node from turning Ready.
func (k *kubelet) hold(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[node] = true
}

// stop makes the node's agent vanish.
func (k *kubelet) stop(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gone[node] = true
}

// release lets the node's pods turn Ready.
func (e *env) release(node string) {
	e.kubelet.mu.Lock()
	delete(e.kubelet.held, node)
	e.kubelet.mu.Unlock()
	for _, p := range e.podsOn(node) {
		e.kubelet.handle(e.ctx(), p)
	}
}

func intstrInt(n int32) intstr.IntOrString { return intstr.FromInt32(n) }

type nodeOpt func(*corev1.Node)

func labeled(k, v string) nodeOpt {
	return func(n *corev1.Node) { n.Labels[k] = v }
}

func tainted(key string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: effect}) }
}

func (e *env) createNode(name string, opts ...nodeOpt) {
	e.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	for _, o := range opts {
		o(n)
	}
	if _, err := e.client.CoreV1().Nodes().Create(e.ctx(), n, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create node %s: %v", name, err)
	}
}

type dsOpt func(*appsv1.DaemonSet)

func onNodesLabeled(k, v string) dsOpt {
	return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = map[string]string{k: v} }
}

func tolerating(key string) dsOpt {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Tolerations = append(ds.Spec.Template.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	}
}

func onDelete(ds *appsv1.DaemonSet) {
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
}

func historyLimit(n int32) dsOpt {
	return func(ds *appsv1.DaemonSet) { ds.Spec.RevisionHistoryLimit = &n }
}

func (e *env) createDaemonSet(name string, opts ...dsOpt) *appsv1.DaemonSet {
	e.t.Helper()
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true,
					Containers:  []corev1.Container{{Name: "daemon", Image: "daemon:1"}},
				},
			},
		},
	}
	for _, o := range opts {
		o(ds)
	}
	out, err := e.client.AppsV1().DaemonSets(ns).Create(e.ctx(), ds, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create daemonset %s: %v", name, err)
	}
	return out
}

func (e *env) getDaemonSet(name string) *appsv1.DaemonSet {
	e.t.Helper()
	ds, err := e.client.AppsV1().DaemonSets(ns).Get(e.ctx(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get daemonset %s: %v", name, err)
	}
	return ds
}

// setImage changes the template, as an upgrade does.
func (e *env) setImage(name, image string) *appsv1.DaemonSet {
	e.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"daemon","image":%q}]}}}}`, image)
	ds, err := e.client.AppsV1().DaemonSets(ns).Patch(e.ctx(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		e.t.Fatalf("set image of %s: %v", name, err)
	}
	return ds
}

// pods lists the pods of a DaemonSet (by its app label).
func (e *env) pods(name string) []*corev1.Pod {
	return e.listPods(metav1.ListOptions{LabelSelector: "app=" + name})
}

// podsOn lists every pod bound to node.
func (e *env) podsOn(node string) []*corev1.Pod {
	return e.listPods(metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
}

func (e *env) listPods(opts metav1.ListOptions) []*corev1.Pod {
	e.t.Helper()
	list, err := e.client.CoreV1().Pods(ns).List(e.ctx(), opts)
	if err != nil {
		e.t.Fatalf("list pods: %v", err)
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}

// nodesOf maps node -> the DaemonSet's live pods there.
func (e *env) nodesOf(name string) map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, p := range e.pods(name) {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
		}
	}
	return out
}

// waitNodes waits until the DaemonSet runs exactly one live pod on exactly
// the given nodes, made from its current template (image).
func (e *env) waitNodes(name, image string, nodes ...string) {
	e.t.Helper()
	slices.Sort(nodes)
	testapi.Eventually(e.t, timeout, fmt.Sprintf("daemonset %s with image %s on %v", name, image, nodes), func() bool {
		var have []string
		for n, pods := range e.nodesOf(name) {
			if len(pods) != 1 || pods[0].Spec.Containers[0].Image != image {
				return false
			}
			have = append(have, n)
		}
		slices.Sort(have)
		return slices.Equal(have, nodes)
	})
}

// waitStatus waits until the DaemonSet's status, observed for its current
// generation, satisfies ok.
func (e *env) waitStatus(name, what string, ok func(appsv1.DaemonSetStatus) bool) appsv1.DaemonSetStatus {
	e.t.Helper()
	var ds *appsv1.DaemonSet
	testapi.Eventually(e.t, timeout, "status of "+name+": "+what, func() bool {
		ds = e.getDaemonSet(name)
		return ds.Status.ObservedGeneration == ds.Generation && ok(ds.Status)
	})
	return ds.Status
}

// rolledOut is what `kubectl rollout status` waits for.
func rolledOut(want int32) func(appsv1.DaemonSetStatus) bool {
	return func(s appsv1.DaemonSetStatus) bool {
		return s.DesiredNumberScheduled == want && s.CurrentNumberScheduled == want && s.UpdatedNumberScheduled == want &&
			s.NumberReady == want && s.NumberAvailable == want && s.NumberUnavailable == 0 && s.NumberMisscheduled == 0
	}
}

func (e *env) revisions(name string) []appsv1.ControllerRevision {
	e.t.Helper()
	list, err := e.client.AppsV1().ControllerRevisions(ns).List(e.ctx(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		e.t.Fatalf("list controller revisions: %v", err)
	}
	return list.Items
}

func (e *env) events(name, reason string) []corev1.Event {
	e.t.Helper()
	sel := fields.Set{"involvedObject.name": name, "involvedObject.kind": "DaemonSet", "reason": reason}.AsSelector().String()
	list, err := e.client.CoreV1().Events(ns).List(e.ctx(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		e.t.Fatalf("list events: %v", err)
	}
	return list.Items
}
