package cloudroutes

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodenet/nodenet/routes"
)

// sync makes the managed part of the table match the nodes: adds first
// (a changed gateway is replaced in place), then deletes, then the node
// conditions for nodes whose routes are all in place.
func (c *Controller) sync(ctx context.Context) error {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	p := planRoutes(nodes, c.config)
	c.reportSkipped(p.skipped)

	listed, err := c.table.List(ctx)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	var current []routes.Route
	for _, r := range listed {
		if c.managed(r.Dst) {
			current = append(current, r)
		}
	}
	add, del := routes.Diff(p.desired, current)

	var errs []error
	failed := map[string]bool{}
	for _, r := range add {
		n := p.owner[r.Dst]
		if err := c.table.Add(ctx, r); err != nil {
			failed[n.Name] = true
			c.recorder.Eventf(n, corev1.EventTypeWarning, "FailedToCreateRoute",
				"Could not create route %s for node %s: %v", r, n.Name, err)
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
			continue
		}
		c.log.Info("created route", "node", n.Name, "route", r.String())
	}
	for _, r := range del {
		err := c.table.Delete(ctx, r)
		if errors.Is(err, routes.ErrNotFound) {
			continue // replaced by an add above, or removed by someone else
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.log.Info("deleted route", "route", r.String())
	}
	for _, n := range p.complete {
		if failed[n.Name] {
			continue
		}
		if err := c.markNetworkAvailable(ctx, n); err != nil {
			c.recorder.Eventf(n, corev1.EventTypeWarning, "FailedToUpdateNetworkCondition", "%v", err)
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reportSkipped logs each reason a podCIDR got no route once, when it
// first appears or changes, instead of on every resync.
func (c *Controller) reportSkipped(skipped map[podCIDRKey]string) {
	for key, why := range skipped {
		if c.skipped[key] != why {
			c.log.Info("not creating route", "node", key.node, "podCIDR", key.podCIDR, "reason", why)
		}
	}
	c.skipped = skipped
}
