package scheduler

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/internal/testapi"
)

const timeout = 20 * time.Second

func startScheduler(t *testing.T, client kubernetes.Interface, opts Options) {
	t.Helper()
	testapi.RunController(t, client, "nodenet-scheduler", 4, func(f informers.SharedInformerFactory, r record.EventRecorder) (testapi.Runner, error) {
		return New(client, f, opts, r, testapi.Logger())
	})
}

type nodeOpt func(*corev1.Node)

func labeled(kv ...string) nodeOpt {
	return func(n *corev1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func tainted(key, value string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

func readiness(status corev1.ConditionStatus) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Conditions = nil
		if status != "" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
		}
	}
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

// createNode registers a Ready node unless opts say otherwise.
func createNode(t *testing.T, client kubernetes.Interface, name string, opts ...nodeOpt) {
	t.Helper()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(n)
	}
	if _, err := client.CoreV1().Nodes().Create(testapi.Context(t), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
}

type podOpt func(*corev1.Pod)

func selecting(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func tolerating(tol corev1.Toleration) podOpt {
	return func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, tol) }
}

func createPod(t *testing.T, client kubernetes.Interface, name string, opts ...podOpt) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	for _, o := range opts {
		o(p)
	}
	if _, err := client.CoreV1().Pods("default").Create(testapi.Context(t), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

func getPod(t *testing.T, client kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods("default").Get(testapi.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

// waitBound waits until the pod is bound and returns its node.
func waitBound(t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	var node string
	testapi.Eventually(t, timeout, "pod "+name+" bound", func() bool {
		node = getPod(t, client, name).Spec.NodeName
		return node != ""
	})
	return node
}

// stillUnbound asserts the pod stays unbound for a while.
func stillUnbound(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := getPod(t, client, name).Spec.NodeName; n != "" {
			t.Fatalf("pod %s bound to %s, want it left unbound", name, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func podEvents(t *testing.T, client kubernetes.Interface, name, reason string) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.name": name, "involvedObject.kind": "Pod", "reason": reason}.AsSelector().String()
	list, err := client.CoreV1().Events("default").List(testapi.Context(t), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	return list.Items
}

// waitFailedScheduling waits for a FailedScheduling event whose message
// contains every part, and for the matching PodScheduled condition.
func waitFailedScheduling(t *testing.T, client kubernetes.Interface, name string, parts ...string) {
	t.Helper()
	has := func(msg string) bool {
		for _, p := range parts {
			if !strings.Contains(msg, p) {
				return false
			}
		}
		return true
	}
	var last string
	testapi.Eventually(t, timeout, "FailedScheduling event for "+name, func() bool {
		for _, ev := range podEvents(t, client, name, ReasonFailedScheduling) {
			last = ev.Message
			if ev.Type == corev1.EventTypeWarning && has(ev.Message) {
				return true
			}
		}
		return false
	})
	testapi.Eventually(t, timeout, "PodScheduled=False on "+name, func() bool {
		for _, c := range getPod(t, client, name).Status.Conditions {
			if c.Type == corev1.PodScheduled {
				last = c.Message
				return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && has(c.Message)
			}
		}
		return false
	})
	t.Logf("%s: %s", name, last)
}
