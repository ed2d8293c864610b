package cloudroutes

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition values the cloud-controller-manager's route controller uses,
// which tools and the node lifecycle controller recognise.
const (
	reasonRouteCreated  = "RouteCreated"
	messageRouteCreated = "RouteController created a route"
)

// networkAvailable reports whether the node already says its network is
// available. Whoever said so (us, or a CNI daemon such as flannel with
// reason FlannelIsUp), there is nothing to add: the CCM behaves the same.
func networkAvailable(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return c.Status == corev1.ConditionFalse
		}
	}
	return false
}

// markNetworkAvailable sets NetworkUnavailable=False on the node with a
// strategic merge patch of its status, which touches only that condition
// (conditions merge by type), so it cannot clobber the kubelet's.
func (c *Controller) markNetworkAvailable(ctx context.Context, n *corev1.Node) error {
	if networkAvailable(n) {
		return nil
	}
	now := metav1.Now()
	patch, err := json.Marshal(map[string]any{
		"status": map[string]any{
			"conditions": []corev1.NodeCondition{{
				Type:               corev1.NodeNetworkUnavailable,
				Status:             corev1.ConditionFalse,
				Reason:             reasonRouteCreated,
				Message:            messageRouteCreated,
				LastTransitionTime: now,
				LastHeartbeatTime:  now,
			}},
		},
	})
	if err != nil {
		return fmt.Errorf("marshal condition patch: %w", err)
	}
	_, err = c.client.CoreV1().Nodes().PatchStatus(ctx, n.Name, patch)
	if apierrors.IsNotFound(err) {
		return nil // deleted since; the next sync removes its route
	}
	if err != nil {
		return fmt.Errorf("set NetworkUnavailable=False on node %s: %w", n.Name, err)
	}
	c.log.Info("node network available", "node", n.Name, "reason", reasonRouteCreated)
	return nil
}
