package cloudroutes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

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
	failed := map[string]bool{}          // nodes: no condition for them
	failedDst := map[netip.Prefix]bool{} // routes not in place
	for _, r := range add {
		n := p.owner[r.Dst]
		err := c.table.Add(ctx, r)
		op := c.addOp(r)
		c.metrics.count(op, err)
		if err != nil {
			failed[n.Name], failedDst[r.Dst] = true, true
			c.recorder.Eventf(n, corev1.EventTypeWarning, "FailedToCreateRoute",
				"Could not create route %s for node %s: %v", r, n.Name, err)
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
			continue
		}
		if op == opCreate {
			c.log.Info("created route", "node", n.Name, "route", r.String())
			continue
		}
		// The notice may still be on its way (the table was listed after
		// the delete, before the watch handled it); then the latency goes
		// unmeasured and the late entry is replaced by the next notice.
		if at, ok := c.deleted.take(r.Dst); ok {
			took := time.Since(at)
			c.metrics.repair.Observe(took.Seconds())
			c.log.Info("repaired route deleted from the table", "node", n.Name, "route", r.String(), "after", took)
		} else {
			c.log.Info("repaired route missing from the table", "node", n.Name, "route", r.String())
		}
	}
	for _, r := range del {
		err := c.table.Delete(ctx, r)
		if errors.Is(err, routes.ErrNotFound) {
			continue // replaced by an add above, or removed by someone else
		}
		c.metrics.count(opDelete, err)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.log.Info("deleted route", "route", r.String())
	}
	c.programmed = map[netip.Prefix]routes.Route{}
	for _, r := range p.desired {
		if !failedDst[r.Dst] {
			c.programmed[r.Dst] = r
		}
	}
	c.deleted.forget(c.programmed)
	c.metrics.routes.Set(float64(len(c.programmed)))
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

// addOp tells a repair from a create: the last sync left the same route
// in place, and it is gone.
func (c *Controller) addOp(r routes.Route) string {
	if prev, ok := c.programmed[r.Dst]; ok && prev.Gw == r.Gw {
		return opRepair
	}
	return opCreate
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
