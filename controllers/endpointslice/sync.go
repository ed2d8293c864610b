package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// sync converges the slices of one Service (key "namespace/name") with its
// pods. It is idempotent: with nothing changed it writes nothing.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we queued; retrying cannot fix it
	}
	svc, err := c.services.Services(ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		svc = nil
	case err != nil:
		return fmt.Errorf("get service %s: %w", key, err)
	}
	existing, stale := c.tracker.view(key, func() []*discoveryv1.EndpointSlice { return c.managedSlices(key) })
	if stale {
		return errStaleCache
	}
	trigger := c.triggers.take(key)

	var p plan
	if svc == nil || !selectorManaged(svc) {
		// Gone, or no longer ours to manage (selector removed, now
		// ExternalName): remove what we wrote; a user may now write their
		// own slices.
		p.delete = existing
	} else {
		p = newPlanner(svc, c.opts.MaxEndpointsPerSlice, trigger).plan(c.desiredGroups(svc), existing)
	}
	if p.empty() {
		return nil
	}
	start := time.Now()
	if err := c.apply(ctx, key, p); err != nil {
		// The change is still pending: keep its time for the retry.
		c.triggers.note(key, trigger)
		if svc != nil {
			c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpointSlices",
				"Error updating EndpointSlices for Service %s: %v", key, err)
		}
		return err
	}
	c.log.Debug("synced", "service", key, "created", len(p.create), "updated", len(p.update),
		"deleted", len(p.delete), "took", time.Since(start))
	return nil
}

// selectorManaged: only Services with a selector get controller-managed
// slices; ExternalName Services have no endpoints at all.
func selectorManaged(svc *corev1.Service) bool {
	return len(svc.Spec.Selector) > 0 && svc.Spec.Type != corev1.ServiceTypeExternalName
}

// apply sends a plan's writes, recording each in the tracker so that later
// syncs can tell a lagging cache from drift. It stops at the first failure:
// the retry plans again from whatever did land.
func (c *Controller) apply(ctx context.Context, key string, p plan) error {
	for _, s := range p.create {
		out, err := c.client.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil // the namespace is going away and takes the Service with it
			}
			return fmt.Errorf("create endpointslice for %s: %w", key, err)
		}
		c.tracker.wrote(key, out)
	}
	for _, s := range p.update {
		out, err := c.client.DiscoveryV1().EndpointSlices(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("update endpointslice %s/%s: %w", s.Namespace, s.Name, err)
		}
		c.tracker.wrote(key, out)
	}
	var errs []error
	for _, s := range p.delete {
		// The UID precondition keeps us from deleting a slice that was
		// replaced by another of the same name since we looked.
		err := c.client.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &s.UID},
		})
		switch {
		case err == nil:
			c.tracker.removed(key, s)
		case apierrors.IsNotFound(err):
			// Someone else deleted it; the informer's delete event settles it.
		default:
			errs = append(errs, fmt.Errorf("delete endpointslice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	return errors.Join(errs...)
}
