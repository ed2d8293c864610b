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
	if spec, ok := containerSpec(pod, c.name); ok && grace > 0 && spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil {
		start := time.Now()
		if err := w.runHook(ctx, pod, spec, spec.Lifecycle.PreStop, grace); err != nil {
			w.a.log.Warn("preStop hook", "pod", pod.Namespace+"/"+pod.Name, "container", c.name, "err", err)
			w.a.event(pod, c.name, corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed: %v", err)
		}
		grace = max(grace-time.Since(start), minGraceAfterHook)
	}
	c.stop(grace)
}

// containerSpec is the named container of pod (nil: none).
func containerSpec(pod *corev1.Pod, name string) (corev1.Container, bool) {
	if pod != nil {
		for _, c := range pod.Spec.Containers {
			if c.Name == name {
				return c, true
			}
		}
	}
	return corev1.Container{}, false
}

// errHookTimeout: the hook was still running when the grace period ended.
var errHookTimeout = errors.New("still running at the end of the grace period")

// runHook runs one of spec's lifecycle handlers for at most limit: sleep,
// exec in the container's namespaces, or an HTTP GET to the pod
// (tcpSocket is accepted by the API for compatibility and, as in the
// kubelet, does nothing).
func (w *podWorker) runHook(ctx context.Context, pod *corev1.Pod, spec corev1.Container, h *corev1.LifecycleHandler, limit time.Duration) error {
	switch {
	case h.Sleep != nil:
		want := time.Duration(h.Sleep.Seconds) * time.Second
		t := time.NewTimer(min(want, limit))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if want > limit {
			return fmt.Errorf("sleep %ds: %w", h.Sleep.Seconds, errHookTimeout)
		}
		return nil
	case h.Exec != nil, h.HTTPGet != nil:
		// A probe with the same handler runs it the same way (exec through
		// the shim in the container's namespaces, GET to the pod's IP).
		p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: h.Exec, HTTPGet: h.HTTPGet}}
		return w.runProbe(ctx, pod, spec, p, limit)
	}
	return nil
}
