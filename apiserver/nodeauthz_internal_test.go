package apiserver

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeMayWritePod: the write-time half of the node restriction decides
// on the stored pod, whatever the (possibly stale) watch cache told the
// authorizer: a node writes only a pod bound to it; others are not held.
func TestNodeMayWritePod(t *testing.T) {
	pods := &apiRequest{res: &resource{gv: coreV1, plural: "pods"}, namespace: "ns", name: "p"}
	onB := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{NodeName: "node-b"}}
	as := func(u user) context.Context { return context.WithValue(context.Background(), userKey{}, u) }
	nodeA := user{Name: nodeUserPrefix + "node-a", Groups: []string{nodesGroup}}
	nodeB := user{Name: nodeUserPrefix + "node-b", Groups: []string{nodesGroup}}

	if err := nodeMayWritePod(as(nodeA), pods, onB); !apierrors.IsForbidden(err) {
		t.Errorf("node-a writing node-b's pod: %v, want 403", err)
	}
	if err := nodeMayWritePod(as(nodeB), pods, onB); err != nil {
		t.Errorf("node-b writing its own pod: %v", err)
	}
	if err := nodeMayWritePod(as(user{Name: "admin", Groups: []string{"system:masters"}}), pods, onB); err != nil {
		t.Errorf("admin: %v", err)
	}
	// Other resources are the authorizer's alone.
	nodes := &apiRequest{res: &resource{gv: coreV1, plural: "nodes"}, name: "node-b"}
	if err := nodeMayWritePod(as(nodeA), nodes, &corev1.Node{}); err != nil {
		t.Errorf("a node write: %v", err)
	}
}
