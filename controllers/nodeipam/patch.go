package nodeipam

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Reasons of the NetworkUnavailable condition this controller manages.
const (
	ConditionReasonNoCIDR       = "NoCIDRAvailable"
	ConditionReasonCIDRAssigned = "CIDRAssigned"
)

// patchCIDRs writes spec.podCIDR(s) with a merge patch: it touches nothing
// else of the Node, needs no resourceVersion, and the API server refuses it
// if the Node already holds other CIDRs (they are immutable).
func (c *Controller) patchCIDRs(ctx context.Context, name string, cidrs []netip.Prefix) error {
	type spec struct {
		PodCIDR  string   `json:"podCIDR"`
		PodCIDRs []string `json:"podCIDRs"`
	}
	body, err := json.Marshal(struct {
		Spec spec `json:"spec"`
	}{spec{PodCIDR: cidrs[0].String(), PodCIDRs: prefixStrings(cidrs)}})
	if err != nil {
		return fmt.Errorf("encode podCIDR patch: %w", err)
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

// patchUnavailable sets the NetworkUnavailable condition through the status
// subresource; a strategic merge patch merges conditions by type, so the
// kubelet's conditions stay as they are.
func (c *Controller) patchUnavailable(ctx context.Context, name string, status corev1.ConditionStatus, reason, msg string) error {
	now := metav1.Now()
	cond := corev1.NodeCondition{
		Type: corev1.NodeNetworkUnavailable, Status: status, Reason: reason, Message: msg,
		LastHeartbeatTime: now, LastTransitionTime: now,
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return fmt.Errorf("encode condition patch: %w", err)
	}
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("set node %s condition NetworkUnavailable=%s (%s): %w", name, status, reason, err)
	}
	return nil
}
