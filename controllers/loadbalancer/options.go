package loadbalancer

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/nodenet/nodenet/internal/cidrlist"
)

// Options configures the controller.
type Options struct {
	// Pools are the CIDRs addresses are handed out from (--lb-ip-pool,
	// cidrlist.Pools): IPv4 and IPv6 may be mixed; pools must not overlap
	// — overlaps are refused rather than merged, since they are almost
	// always a typo and merging would hide it.
	Pools []netip.Prefix
}

// Validate reports what is wrong with o; New refuses the same.
func (o Options) Validate() error {
	return ValidatePools(o.Pools)
}

// ValidatePools checks pools as the LoadBalancer IP controller and the
// load-balancer routes controller take them.
func ValidatePools(pools []netip.Prefix) error {
	if len(pools) == 0 {
		return errors.New("--lb-ip-pool: at least one CIDR is required")
	}
	if err := cidrlist.Check(pools, cidrlist.Pools); err != nil {
		return fmt.Errorf("--lb-ip-pool: %w", err)
	}
	return nil
}
