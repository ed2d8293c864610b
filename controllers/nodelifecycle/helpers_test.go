package nodelifecycle

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/internal/periodic"
	"github.com/nodenet/nodenet/internal/testapi"
)

const (
	grace   = 2 * time.Second
	period  = 500 * time.Millisecond
	timeout = 20 * time.Second
)

func startController(t *testing.T, client kubernetes.Interface) (stop func()) {
	t.Helper()
	return testapi.RunController(t, client, "nodenet-nodelifecycle", 2, func(f informers.SharedInformerFactory, r record.EventRecorder) (testapi.Runner, error) {
		return New(client, f, Options{NodeMonitorGracePeriod: grace, NodeMonitorPeriod: period}, r, testapi.Logger())
	})
}

// createNode registers a node that reports Ready.
func createNode(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	now := metav1.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}}},
	}
	if _, err := client.CoreV1().Nodes().Create(testapi.Context(t), node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
}

// heartbeat renews a node's lease every 200 ms, as a node agent would.
type heartbeat struct {
	mu        sync.Mutex
	lastStart time.Time // when the last successful renewal was sent
	cancel    context.CancelFunc
	done      chan struct{}
}

func startHeartbeat(t *testing.T, client kubernetes.Interface, name string) *heartbeat {
	t.Helper()
	ctx, cancel := context.WithCancel(testapi.Context(t))
	h := &heartbeat{cancel: cancel, done: make(chan struct{})}
	leases := client.CoordinationV1().Leases(LeaseNamespace)
	renew := func(context.Context) {
		start := time.Now()
		now := metav1.NewMicroTime(start)
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			dur := int32(40)
			l = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: LeaseNamespace},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &dur, RenewTime: &now},
			}
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		} else {
			l.Spec.RenewTime = &now
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err == nil {
			h.mu.Lock()
			h.lastStart = start
			h.mu.Unlock()
		} else if ctx.Err() == nil {
			t.Logf("renew lease %s: %v", name, err)
		}
	}
	renew(ctx)
	go func() {
		defer close(h.done)
		periodic.Every(ctx, 200*time.Millisecond, renew)
	}()
	t.Cleanup(func() { h.stop() })
	return h
}

// stop ends the heartbeat and returns when the last renewal was sent.
func (h *heartbeat) stop() time.Time {
	h.cancel()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastStart
}

// createReadyPod puts a running, ready pod on the node.
func createReadyPod(t *testing.T, client kubernetes.Interface, name, node string) {
	t.Helper()
	created := createTolerantPod(t, client, name, node, nil)
	now := metav1.Now()
	created.Status.Phase = corev1.PodRunning
	created.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	if _, err := client.CoreV1().Pods("default").UpdateStatus(testapi.Context(t), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("mark pod %s ready: %v", name, err)
	}
}

func getNode(t *testing.T, client kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(testapi.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return n
}

func readyOf(n *corev1.Node) corev1.NodeCondition {
	if c := readyCondition(n); c != nil {
		return *c
	}
	return corev1.NodeCondition{}
}

func podCondition(t *testing.T, client kubernetes.Interface, name string, typ corev1.PodConditionType) corev1.PodCondition {
	t.Helper()
	p, err := client.CoreV1().Pods("default").Get(testapi.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return corev1.PodCondition{}
}

func unreachableTaintCount(n *corev1.Node) int { return taintCount(n, corev1.TaintNodeUnreachable) }

// taintCount counts the node's taints with key.
func taintCount(n *corev1.Node, key string) int {
	count := 0
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			count++
		}
	}
	return count
}

// setNodeReady posts the node's Ready condition as its agent would.
func setNodeReady(t *testing.T, client kubernetes.Interface, name string, status corev1.ConditionStatus, reason string) {
	t.Helper()
	n := getNode(t, client, name)
	setReady(n, corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()})
	if _, err := client.CoreV1().Nodes().UpdateStatus(testapi.Context(t), n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set node %s Ready=%s: %v", name, status, err)
	}
}

// assertHealthy fails if the node is not Ready=True without taints.
func assertHealthy(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	n := getNode(t, client, name)
	if r := readyOf(n); r.Status != corev1.ConditionTrue || unreachableTaintCount(n) != 0 {
		t.Errorf("node %s: Ready=%s (%s), %d unreachable taints; want Ready=True and no taints", name, r.Status, r.Reason, unreachableTaintCount(n))
	}
}

// createTolerantPod puts a pod with these tolerations on the node.
func createTolerantPod(t *testing.T, client kubernetes.Interface, name, node string, tolerations []corev1.Toleration) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Containers:  []corev1.Container{{Name: "app", Image: "busybox"}},
			Tolerations: tolerations,
		},
	}
	created, err := client.CoreV1().Pods("default").Create(testapi.Context(t), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return created
}
