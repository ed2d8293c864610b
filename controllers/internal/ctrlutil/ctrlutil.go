package ctrlutil

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

// NewQueue returns the rate-limited queue of object keys a controller works
// from, with client-go's default controller backoff; name labels the queue's
// metrics.
func NewQueue(name string) workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// PodNodeName is a cache.IndexFunc indexing pods by spec.nodeName; pods not
// yet bound to a node are left out of the index.
func PodNodeName(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// Recorder returns r, or a recorder that drops every event when r is nil.
func Recorder(r record.EventRecorder) record.EventRecorder {
	if r == nil {
		return nopRecorder{}
	}
	return r
}

// nopRecorder stands in for a nil record.EventRecorder.
type nopRecorder struct{}

func (nopRecorder) Event(runtime.Object, string, string, string)          {}
func (nopRecorder) Eventf(runtime.Object, string, string, string, ...any) {}
func (nopRecorder) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}

// Handler is one event handler a controller registers on an informer.
type Handler struct {
	Informer cache.SharedIndexInformer
	Handler  cache.ResourceEventHandler
}

// AddHandlers registers handlers for the controller named controller and
// returns what its Run waits for. Waiting for the registrations (not just
// the informers) means every object of the initial list has passed through
// the controller's handlers, so everything is queued before a worker starts.
func AddHandlers(controller string, handlers ...Handler) ([]cache.InformerSynced, error) {
	synced := make([]cache.InformerSynced, 0, len(handlers))
	for _, h := range handlers {
		reg, err := h.Informer.AddEventHandler(h.Handler)
		if err != nil {
			return nil, fmt.Errorf("add %s controller event handler: %w", controller, err)
		}
		synced = append(synced, reg.HasSynced)
	}
	return synced, nil
}

// OnChange returns handlers calling fn with the object of every add, update
// (the new object) and delete: for controllers that only need to know which
// object changed, not how.
func OnChange(fn func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    fn,
		UpdateFunc: func(_, obj any) { fn(obj) },
		DeleteFunc: fn,
	}
}

// Enqueue adds obj's namespace/name key to queue; a deleted object's
// tombstone yields the key of the object it stands for.
func Enqueue(queue workqueue.TypedInterface[string], obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	queue.Add(key)
}
