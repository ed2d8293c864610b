package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// minGraceAfterHook is what the kubelet leaves a container between its
// preStop hook and SIGKILL when the hook used up the grace period: the
// process still gets its SIGTERM and a moment to act on it.
const minGraceAfterHook = 2 * time.Second

// stopContainer ends one container as the kubelet does: its preStop hook
// first (bounded by the grace period), then SIGTERM, then SIGKILL once the
// rest of the grace period has passed. The hook is why a server behind a
// Service can go on serving while every node's proxy takes its endpoint
// out: the SIGTERM comes only after the hook returns.
func (w *podWorker) stopContainer(ctx context.Context, pod *corev1.Pod, c *container, grace time.Duration) {
	if grace > 0 && pod != nil {
		if h := preStopHook(pod, c.name); h != nil {
			start := time.Now()
			if err := w.runHook(ctx, pod, c.name, h, grace); err != nil {
				w.a.log.Warn("preStop hook", "pod", pod.Namespace+"/"+pod.Name, "container", c.name, "err", err)
				w.a.event(pod, c.name, corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed: %v", err)
			}
			grace = max(grace-time.Since(start), minGraceAfterHook)
		}
	}
	c.stop(grace)
}

// preStopHook is the named container's preStop handler, or nil.
func preStopHook(pod *corev1.Pod, name string) *corev1.LifecycleHandler {
	for _, c := range pod.Spec.Containers {
		if c.Name == name && c.Lifecycle != nil {
			return c.Lifecycle.PreStop
		}
	}
	return nil
}

// errHookTimeout: the hook was still running when the grace period ended.
var errHookTimeout = errors.New("still running at the end of the grace period")

// runHook runs one lifecycle handler for at most limit: sleep, exec in the
// container's namespaces, or an HTTP GET to the pod (tcpSocket is
// accepted by the API for compatibility and, as in the kubelet, does
// nothing).
func (w *podWorker) runHook(ctx context.Context, pod *corev1.Pod, name string, h *corev1.LifecycleHandler, limit time.Duration) error {
	switch {
	case h.Sleep != nil:
		d := time.Duration(h.Sleep.Seconds) * time.Second
		if d > limit {
			d = limit
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if time.Duration(h.Sleep.Seconds)*time.Second > limit {
			return fmt.Errorf("sleep %ds: %w", h.Sleep.Seconds, errHookTimeout)
		}
		return nil
	case h.Exec != nil, h.HTTPGet != nil:
		var spec corev1.Container
		for _, c := range pod.Spec.Containers {
			if c.Name == name {
				spec = c
			}
		}
		// A probe with the same handler runs it the same way (exec through
		// the shim in the container's namespaces, GET to the pod's IP).
		p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: h.Exec, HTTPGet: h.HTTPGet}}
		return w.runProbe(ctx, pod, spec, p, limit)
	}
	return nil
}
