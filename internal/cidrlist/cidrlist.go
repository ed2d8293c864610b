package cidrlist

import (
	"fmt"
	"net/netip"
	"strings"
)

// Rule says what a list may hold. Every rule refuses IPv4-mapped IPv6
// CIDRs (::ffff:10.0.0.0/104 is ambiguous: write the IPv4 CIDR).
type Rule struct {
	// OnePerFamily allows one CIDR, or two of different IP families: a
	// dual-stack pair whose first element is the primary family.
	OnePerFamily bool
	// Disjoint refuses overlapping CIDRs (with OnePerFamily they cannot
	// overlap anyway).
	Disjoint bool
	// StrictHostBits makes Parse refuse a CIDR with host bits set, which
	// in a list of pools is more often a typo than intended, instead of
	// clearing them as Kubernetes does for --cluster-cidr.
	StrictHostBits bool
}

var (
	// DualStack is the rule of --cluster-cidr (and of Kubernetes's other
	// cluster-wide ranges): one CIDR, or one IPv4 and one IPv6 CIDR;
	// 10.244.1.0/16 is read as 10.244.0.0/16.
	DualStack = Rule{OnePerFamily: true}
	// Pools is the rule of address pools such as --lb-ip-pool: any number
	// of CIDRs of either family that do not overlap, without host bits.
	Pools = Rule{Disjoint: true, StrictHostBits: true}
	// Any accepts any list of valid CIDRs, host bits cleared, overlaps
	// allowed (--nodeport-addresses).
	Any = Rule{}
)

// Parse parses values (each one or more comma-separated CIDRs; empty
// elements are ignored) into masked prefixes in the order given and checks
// them against r. An empty input gives an empty list: whether a list is
// required is the caller's decision.
func Parse(values []string, r Rule) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		for s := range strings.SplitSeq(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR: %w", s, err)
			}
			if p != p.Masked() {
				if r.StrictHostBits {
					return nil, fmt.Errorf("%s has host bits set (did you mean %s?)", p, p.Masked())
				}
				p = p.Masked()
			}
			out = append(out, p)
		}
	}
	if err := Check(out, r); err != nil {
		return nil, err
	}
	return out, nil
}

// Check reports whether ps, as options hold them, obey r: every prefix
// valid, masked and not IPv4-mapped, plus r's own conditions.
func Check(ps []netip.Prefix, r Rule) error {
	for _, p := range ps {
		switch {
		case !p.IsValid():
			return fmt.Errorf("%v is not a valid CIDR", p)
		case p.Addr().Is4In6():
			return fmt.Errorf("%s is an IPv4-mapped IPv6 CIDR; write it as IPv4", p)
		case p != p.Masked():
			return fmt.Errorf("%s has host bits set (did you mean %s?)", p, p.Masked())
		}
	}
	if r.OnePerFamily {
		switch {
		case len(ps) > 2:
			return fmt.Errorf("%d CIDRs given; at most two, one IPv4 and one IPv6", len(ps))
		case len(ps) == 2 && ps[0].Addr().Is4() == ps[1].Addr().Is4():
			return fmt.Errorf("%s and %s are of the same IP family; dual-stack takes one CIDR per family", ps[0], ps[1])
		}
	}
	if r.Disjoint {
		for i, p := range ps {
			for _, q := range ps[:i] {
				if p.Overlaps(q) {
					return fmt.Errorf("%s overlaps %s", p, q)
				}
			}
		}
	}
	return nil
}

// Join renders ps as a flag value ("10.244.0.0/16,fd00:10:244::/56").
func Join(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// MustParse is Parse under rule Any, for tests and constants; it panics
// on an error. Rules are for the code that uses the list to check.
func MustParse(values ...string) []netip.Prefix {
	ps, err := Parse(values, Any)
	if err != nil {
		panic(fmt.Sprintf("cidrlist.MustParse(%q): %v", values, err))
	}
	return ps
}
