package endpoints

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// sync converges the Endpoints of one Service (key "namespace/name") with
// its EndpointSlices. With nothing changed it writes nothing.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we queued; retrying cannot fix it
	}
	svc, err := c.services.Services(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get service %s: %w", key, err)
	}
	cur, err := c.endpoints.Endpoints(ns).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("get endpoints %s: %w", key, err)
	}
	switch {
	case svc == nil && cur != nil:
		// As upstream: the Endpoints of a deleted Service go, whoever
		// wrote them.
		return c.delete(ctx, cur)
	case svc == nil:
		return nil
	case !managed(svc) && cur != nil && cur.Labels[LabelManagedBy] == ControllerName:
		return c.delete(ctx, cur)
	case !managed(svc):
		return nil
	}
	slices, err := c.serviceSlices(key)
	if err != nil {
		return err
	}
	want := desired(svc, slices)
	if cur == nil {
		_, err := c.client.CoreV1().Endpoints(ns).Create(ctx, want, metav1.CreateOptions{})
		switch {
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			return nil // the namespace takes the Service with it
		case err != nil:
			c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToCreateEndpoint", "Failed to create endpoint for service %s: %v", key, err)
			return fmt.Errorf("create endpoints %s: %w", key, err)
		}
		c.log.Debug("created", "service", key)
		return nil
	}
	if upToDate(cur, want) {
		return nil
	}
	next := cur.DeepCopy()
	next.Subsets, next.Labels = want.Subsets, want.Labels
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	for _, k := range []string{corev1.EndpointsLastChangeTriggerTime, corev1.EndpointsOverCapacity} {
		delete(next.Annotations, k)
	}
	maps.Copy(next.Annotations, want.Annotations)
	if _, err := c.client.CoreV1().Endpoints(ns).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpoint", "Failed to update endpoint %s: %v", key, err)
		return fmt.Errorf("update endpoints %s: %w", key, err)
	}
	c.log.Debug("updated", "service", key)
	return nil
}

// upToDate: what consumers read (subsets, labels, the over-capacity mark)
// is already stored. A newer trigger time alone is not worth a write, as
// upstream judges too.
func upToDate(cur, want *corev1.Endpoints) bool {
	return apiequality.Semantic.DeepEqual(cur.Subsets, want.Subsets) &&
		maps.Equal(cur.Labels, want.Labels) &&
		cur.Annotations[corev1.EndpointsOverCapacity] == want.Annotations[corev1.EndpointsOverCapacity]
}

// delete removes Endpoints; the UID precondition keeps it from removing a
// replacement created since the cache saw this one.
func (c *Controller) delete(ctx context.Context, ep *corev1.Endpoints) error {
	err := c.client.CoreV1().Endpoints(ep.Namespace).Delete(ctx, ep.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ep.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete endpoints %s/%s: %w", ep.Namespace, ep.Name, err)
	}
	return nil
}
