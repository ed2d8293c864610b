package cloudroutes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/routes"
)

// DefaultReconcilePeriod is --route-reconciliation-period's default, as in
// the cloud-controller-manager.
const DefaultReconcilePeriod = 10 * time.Second

// Options configure the controller.
type Options struct {
	// Table is the routing table to manage, opened by the caller (it
	// decides the namespace, table id and protocol).
	Table routes.Table
	// ClusterCIDRs (--cluster-cidr, cidrlist.DualStack) bound what the
	// controller manages: routes to destinations outside every one of them
	// are never created or deleted.
	ClusterCIDRs []netip.Prefix
	// ReconcilePeriod (--route-reconciliation-period) is how often the
	// table is compared with the nodes even without a change, which is
	// what repairs routes removed behind the controller's back when no
	// Watcher reports it (and bounds the repair when one does). Zero means
	// DefaultReconcilePeriod.
	ReconcilePeriod time.Duration
	// Watcher, when set, reports changes to Table's routes (usually the
	// same *routes.NetlinkTable), so a route deleted by hand is put back
	// at once instead of at the next reconcile.
	Watcher Watcher
	// Metrics, when set, are the metrics to update; the caller registers
	// them. Nil: the controller keeps unregistered ones.
	Metrics *Metrics
}

// Watcher reports changes to the managed route table; routes.NetlinkTable
// implements it with a netlink subscription.
type Watcher interface {
	// Watch calls changed for each change to the table's routes until ctx
	// ends (nil) or the watch fails, and subscribed once a re-list of the
	// table would miss no later change.
	Watch(ctx context.Context, subscribed func(), changed func(routes.RouteChange)) error
}

// config is Options validated and parsed.
type config struct {
	table        routes.Table
	clusterCIDRs []netip.Prefix
	period       time.Duration
	watcher      Watcher
	metrics      *Metrics
}

// Validate reports what is wrong with o; New refuses the same.
func (o Options) Validate() error {
	_, err := o.validate()
	return err
}

func (o Options) validate() (config, error) {
	var errs []error
	if o.Table == nil {
		errs = append(errs, errors.New("no route table given (Options.Table is nil)"))
	}
	if len(o.ClusterCIDRs) == 0 {
		errs = append(errs, errors.New("--cluster-cidr: at least one CIDR is required"))
	}
	if err := cidrlist.Check(o.ClusterCIDRs, cidrlist.DualStack); err != nil {
		errs = append(errs, fmt.Errorf("--cluster-cidr: %w", err))
	}
	cfg := config{table: o.Table, clusterCIDRs: o.ClusterCIDRs, period: o.ReconcilePeriod, watcher: o.Watcher, metrics: o.Metrics}
	if cfg.metrics == nil {
		cfg.metrics = NewMetrics()
	}
	switch {
	case o.ReconcilePeriod == 0:
		cfg.period = DefaultReconcilePeriod
	case o.ReconcilePeriod < 0:
		errs = append(errs, fmt.Errorf("--route-reconciliation-period %v: must be positive", o.ReconcilePeriod))
	}
	if err := errors.Join(errs...); err != nil {
		return config{}, fmt.Errorf("cloud routes: %w", err)
	}
	return cfg, nil
}

// managed reports whether the controller is responsible for routes to dst.
func (c config) managed(dst netip.Prefix) bool {
	for _, cidr := range c.clusterCIDRs {
		if cidr.Bits() <= dst.Bits() && cidr.Contains(dst.Addr()) {
			return true
		}
	}
	return false
}
