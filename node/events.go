package node

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// eventComponent is the source the agent's events carry. It is the
// kubelet's, because the agent does the kubelet's job and tools filter on
// it (`kubectl get events --field-selector source=kubelet`); the node name
// goes into source.host as the kubelet's does.
const eventComponent = "kubelet"

// startEvents records events as core/v1 Events through client-go's
// recorder, as the kubelet does; it returns the stop function.
func (a *Agent) startEvents(ctx context.Context) func() {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.o.Client.CoreV1().Events("")})
	a.recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: eventComponent, Host: a.o.NodeName})
	return b.Shutdown
}

// event records an event about a pod's container (fieldPath
// spec.containers{name}, as the kubelet sets it) or, with container "",
// about the pod.
func (a *Agent) event(pod *corev1.Pod, container, typ, reason, format string, args ...any) {
	if a.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion}
	if container != "" {
		ref.FieldPath = fmt.Sprintf("spec.containers{%s}", container)
	}
	a.recorder.Eventf(ref, typ, reason, format, args...)
}

// terminated is the container's end as status reports it.
func (c *container) terminated() *corev1.ContainerStateTerminated {
	if !c.exited {
		return nil
	}
	reason := "Completed"
	if c.exitCode != 0 {
		reason = "Error"
	}
	return &corev1.ContainerStateTerminated{ExitCode: int32(c.exitCode), Reason: reason,
		StartedAt: metav1.NewTime(c.startedAt), FinishedAt: metav1.NewTime(c.finishedAt)}
}

// backingOff reports whether an exited container must wait before its
// restart; the first time it does, it announces the wait with a BackOff
// warning, the kubelet's "Back-off restarting failed container".
func (w *podWorker) backingOff(pod *corev1.Pod, c *container) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.finishedAt.Sub(c.startedAt) >= backoffReset {
		c.backoff = 0
	}
	if time.Since(c.finishedAt) >= c.backoff {
		c.backoff = min(max(c.backoff*2, backoffInitial), backoffMax)
		return false
	}
	if c.backoffEvent.Before(c.finishedAt) {
		c.backoffEvent = time.Now()
		w.a.event(pod, c.name, corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)", c.name, pod.Name, pod.Namespace, pod.UID)
	}
	return true
}

// inBackOff is true while an exited container waits for its restart.
func (c *container) inBackOff() bool {
	return c.exited && c.backoffEvent.After(c.finishedAt)
}
