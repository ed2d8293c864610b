package nodeipam

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/nodenet/nodenet/ipam/cidrset"
)

// Default node subnet sizes, as in kube-controller-manager.
const (
	DefaultNodeCIDRMaskSizeIPv4 = 24
	DefaultNodeCIDRMaskSizeIPv6 = 64
)

// Options configures the controller. Zero mask sizes mean the defaults.
type Options struct {
	// ClusterCIDRs are the cluster CIDRs (--cluster-cidr), at most one per
	// IP family; the first one is the primary family. An element may hold
	// several comma-separated CIDRs, so the raw flag value can be passed.
	ClusterCIDRs []string
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

// newSets validates o and returns one empty CIDR set per cluster CIDR, in
// flag order. Every error names the flag to fix.
func (o Options) newSets() ([]*cidrset.Set, error) {
	prefixes, err := parseClusterCIDRs(o.ClusterCIDRs)
	if err != nil {
		return nil, err
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

func parseClusterCIDRs(raw []string) ([]netip.Prefix, error) {
	var prefixes []netip.Prefix
	for _, r := range raw {
		for s := range strings.SplitSeq(r, ",") {
			s = strings.TrimSpace(s)
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("--cluster-cidr: %q is not a CIDR: %w", s, err)
			}
			if p.Addr().Is4In6() {
				return nil, fmt.Errorf("--cluster-cidr: %s is an IPv4-mapped IPv6 CIDR; write it as IPv4", p)
			}
			// kube-controller-manager takes 10.244.1.0/16 as 10.244.0.0/16.
			prefixes = append(prefixes, p.Masked())
		}
	}
	switch {
	case len(prefixes) == 0:
		return nil, fmt.Errorf("--cluster-cidr: required")
	case len(prefixes) > 2:
		return nil, fmt.Errorf("--cluster-cidr: %d CIDRs given; at most two, one IPv4 and one IPv6", len(prefixes))
	case len(prefixes) == 2:
		a, b := prefixes[0], prefixes[1]
		if a.Overlaps(b) {
			return nil, fmt.Errorf("--cluster-cidr: %s and %s overlap", a, b)
		}
		if a.Addr().Is4() == b.Addr().Is4() {
			return nil, fmt.Errorf("--cluster-cidr: %s and %s are of the same IP family; dual-stack takes one CIDR per family", a, b)
		}
	}
	return prefixes, nil
}
