package cloudroutes

import (
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
	// what repairs routes removed behind the controller's back. Zero means
	// DefaultReconcilePeriod.
	ReconcilePeriod time.Duration
}

// config is Options validated and parsed.
type config struct {
	table        routes.Table
	clusterCIDRs []netip.Prefix
	period       time.Duration
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
	cfg := config{table: o.Table, clusterCIDRs: o.ClusterCIDRs, period: o.ReconcilePeriod}
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
