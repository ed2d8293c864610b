package loadbalancer

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Options configures the controller.
type Options struct {
	// Pools are the CIDRs addresses are handed out from (flag
	// --lb-ip-pool, comma separated). IPv4 and IPv6 may be mixed; pools
	// must not overlap.
	Pools []string
}

// ParsePools validates the pools. Overlaps are refused rather than merged:
// they are almost always a typo, and silently merging would hide it.
func ParsePools(specs []string) ([]netip.Prefix, error) {
	var pools []netip.Prefix
	for _, s := range specs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--lb-ip-pool %q: %w", s, err)
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("--lb-ip-pool %q: IPv4-mapped IPv6 is ambiguous, write the IPv4 CIDR", s)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("--lb-ip-pool %q: host bits set (did you mean %s?)", s, p.Masked())
		}
		for _, q := range pools {
			if p.Overlaps(q) {
				return nil, fmt.Errorf("--lb-ip-pool %s overlaps %s", p, q)
			}
		}
		pools = append(pools, p)
	}
	if len(pools) == 0 {
		return nil, errors.New("--lb-ip-pool: at least one CIDR is required")
	}
	return pools, nil
}
