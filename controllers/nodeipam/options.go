package nodeipam

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/ipam/cidrset"
)

// Default node subnet sizes, as in kube-controller-manager.
const (
	DefaultNodeCIDRMaskSizeIPv4 = 24
	DefaultNodeCIDRMaskSizeIPv6 = 64
)

// Options configures the controller. Zero mask sizes mean the defaults.
type Options struct {
	// ClusterCIDRs are the cluster CIDRs (--cluster-cidr): one, or one per
	// IP family (cidrlist.DualStack); the first one is the primary family.
	ClusterCIDRs []netip.Prefix
	// NodeCIDRMaskSize (--node-cidr-mask-size) is the node subnet size of
	// a single-stack cluster, whatever its family. Refused with dual-stack.
	NodeCIDRMaskSize int
	// NodeCIDRMaskSizeIPv4 (--node-cidr-mask-size-ipv4) is the prefix
	// length of IPv4 node subnets; default 24.
	NodeCIDRMaskSizeIPv4 int
	// NodeCIDRMaskSizeIPv6 (--node-cidr-mask-size-ipv6) is the prefix
	// length of IPv6 node subnets; default 64.
	NodeCIDRMaskSizeIPv6 int
}

// Validate reports what is wrong with o; New refuses the same. Every error
// names the flag to fix.
func (o Options) Validate() error {
	_, err := o.newSets()
	return err
}

// newSets validates o and returns one empty CIDR set per cluster CIDR, in
// flag order.
func (o Options) newSets() ([]*cidrset.Set, error) {
	prefixes := o.ClusterCIDRs
	if len(prefixes) == 0 {
		return nil, errors.New("--cluster-cidr: required")
	}
	if err := cidrlist.Check(prefixes, cidrlist.DualStack); err != nil {
		return nil, fmt.Errorf("--cluster-cidr: %w", err)
	}
	if o.NodeCIDRMaskSize != 0 && len(prefixes) > 1 {
		return nil, fmt.Errorf("--node-cidr-mask-size: only for a single-stack --cluster-cidr; use --node-cidr-mask-size-ipv4 and --node-cidr-mask-size-ipv6")
	}
	sets := make([]*cidrset.Set, 0, len(prefixes))
	for _, p := range prefixes {
		flag, mask, err := o.maskFor(p)
		if err != nil {
			return nil, err
		}
		if mask <= p.Bits() || mask > p.Addr().BitLen() {
			return nil, fmt.Errorf("%s: /%d must be longer than the cluster CIDR %s and at most /%d",
				flag, mask, p, p.Addr().BitLen())
		}
		s, err := cidrset.New(p, mask)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		sets = append(sets, s)
	}
	return sets, nil
}

// maskFor returns the subnet size for cluster CIDR p and the flag it came
// from, for error messages.
func (o Options) maskFor(p netip.Prefix) (flag string, mask int, err error) {
	flag, mask, def := "--node-cidr-mask-size-ipv6", o.NodeCIDRMaskSizeIPv6, DefaultNodeCIDRMaskSizeIPv6
	if p.Addr().Is4() {
		flag, mask, def = "--node-cidr-mask-size-ipv4", o.NodeCIDRMaskSizeIPv4, DefaultNodeCIDRMaskSizeIPv4
	}
	if o.NodeCIDRMaskSize != 0 {
		if mask != 0 && mask != o.NodeCIDRMaskSize {
			return "", 0, fmt.Errorf("--node-cidr-mask-size=%d conflicts with %s=%d", o.NodeCIDRMaskSize, flag, mask)
		}
		flag, mask = "--node-cidr-mask-size", o.NodeCIDRMaskSize
	}
	if mask < 0 {
		return "", 0, fmt.Errorf("%s: %d is negative", flag, mask)
	}
	if mask == 0 {
		mask = def
	}
	return flag, mask, nil
}
