package cloudroutes

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/internal/testapi"
)

// startController runs a controller against the API server until the test
// ends, and waits for Run to return before the server stops. Events go to
// rec (nil drops them), not to the API server.
func startController(t *testing.T, client kubernetes.Interface, opts Options, rec record.EventRecorder) {
	t.Helper()
	testapi.RunController(t, client, "nodenet-cloudroutes", 2, func(f informers.SharedInformerFactory, _ record.EventRecorder) (testapi.Runner, error) {
		return New(client, f, opts, rec, testapi.Logger())
	})
}

func createNode(t *testing.T, client kubernetes.Interface, n *corev1.Node) {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", n.Name, err)
	}
}

// setInternalIPs replaces the node's addresses with these InternalIPs.
func setInternalIPs(t *testing.T, client kubernetes.Interface, name string, ips ...string) {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = nil
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update node %s status: %v", name, err)
	}
}

// networkCondition returns the node's NetworkUnavailable condition, if any.
func networkCondition(t *testing.T, client kubernetes.Interface, name string) *corev1.NodeCondition {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func expectRouteCreated(t *testing.T, client kubernetes.Interface, names ...string) {
	t.Helper()
	for _, name := range names {
		testapi.Eventually(t, 10*time.Second, "NetworkUnavailable=False on "+name, func() bool {
			c := networkCondition(t, client, name)
			return c != nil && c.Status == corev1.ConditionFalse && c.Reason == reasonRouteCreated
		})
	}
}
