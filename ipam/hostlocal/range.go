package hostlocal

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// Range is one contiguous block of addresses inside a subnet, the JSON
// shape host-local reads in "ranges": {"subnet", "rangeStart", "rangeEnd",
// "gateway"}. The zero values of RangeStart, RangeEnd and Gateway mean
// "default", which Canonical fills in exactly as host-local does.
type Range struct {
	Subnet     netip.Prefix
	RangeStart netip.Addr
	RangeEnd   netip.Addr
	Gateway    netip.Addr
}

// RangeSet is a list of ranges of one address family that a single address
// is allocated from; allocation moves on to the next range when one is full.
// An attachment gets one address per RangeSet.
type RangeSet []Range

type rangeJSON struct {
	Subnet     string `json:"subnet"`
	RangeStart string `json:"rangeStart,omitempty"`
	RangeEnd   string `json:"rangeEnd,omitempty"`
	Gateway    string `json:"gateway,omitempty"`
}

// UnmarshalJSON accepts host-local's range syntax. The subnet must be given
// as its network address; the other fields are plain addresses.
func (r *Range) UnmarshalJSON(b []byte) error {
	var j rangeJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var out Range
	if j.Subnet == "" {
		return fmt.Errorf("range: subnet is missing")
	}
	p, err := netip.ParsePrefix(j.Subnet)
	if err != nil {
		return fmt.Errorf("range: subnet %q is not a CIDR", j.Subnet)
	}
	out.Subnet = netip.PrefixFrom(p.Addr().Unmap(), p.Bits())
	for _, f := range []struct {
		name, val string
		dst       *netip.Addr
	}{
		{"rangeStart", j.RangeStart, &out.RangeStart},
		{"rangeEnd", j.RangeEnd, &out.RangeEnd},
		{"gateway", j.Gateway, &out.Gateway},
	} {
		if f.val == "" {
			continue
		}
		a, err := netip.ParseAddr(f.val)
		if err != nil {
			return fmt.Errorf("range %s: %s %q is not an IP address", j.Subnet, f.name, f.val)
		}
		*f.dst = a.Unmap()
	}
	*r = out
	return nil
}

// MarshalJSON writes the host-local syntax, omitting unset fields.
func (r Range) MarshalJSON() ([]byte, error) {
	j := rangeJSON{Subnet: r.Subnet.String()}
	if r.RangeStart.IsValid() {
		j.RangeStart = r.RangeStart.String()
	}
	if r.RangeEnd.IsValid() {
		j.RangeEnd = r.RangeEnd.String()
	}
	if r.Gateway.IsValid() {
		j.Gateway = r.Gateway.String()
	}
	return json.Marshal(j)
}

// Canonical validates r and fills in the defaults host-local uses: the
// gateway and the range start default to the subnet's first address, the
// range end to its last usable one (the broadcast address is excluded for
// IPv4). Allocation skips the gateway.
func (r Range) Canonical() (Range, error) {
	if !r.Subnet.IsValid() {
		return Range{}, fmt.Errorf("range: subnet is missing")
	}
	sn := r.Subnet
	if sn.Addr() != sn.Masked().Addr() {
		return Range{}, fmt.Errorf("range %s: subnet has host bits set (the network address is %s)", sn, sn.Masked())
	}
	if sn.Bits() > sn.Addr().BitLen()-2 {
		return Range{}, fmt.Errorf("range %s: subnet too small to allocate from", sn)
	}
	family := func(a netip.Addr) bool { return a.Is4() == sn.Addr().Is4() }
	out := r
	if !out.Gateway.IsValid() {
		out.Gateway = sn.Addr().Next()
	} else if !family(out.Gateway) || !sn.Contains(out.Gateway) {
		return Range{}, fmt.Errorf("range %s: gateway %s is not in the subnet", sn, out.Gateway)
	}
	if !out.RangeStart.IsValid() {
		out.RangeStart = sn.Addr().Next()
	} else if !family(out.RangeStart) || !sn.Contains(out.RangeStart) {
		return Range{}, fmt.Errorf("range %s: rangeStart %s is not in the subnet", sn, out.RangeStart)
	}
	if !out.RangeEnd.IsValid() {
		out.RangeEnd = lastAddr(sn)
	} else if !family(out.RangeEnd) || !sn.Contains(out.RangeEnd) {
		return Range{}, fmt.Errorf("range %s: rangeEnd %s is not in the subnet", sn, out.RangeEnd)
	}
	if out.RangeStart.Compare(out.RangeEnd) > 0 {
		return Range{}, fmt.Errorf("range %s: rangeStart %s is after rangeEnd %s", sn, out.RangeStart, out.RangeEnd)
	}
	return out, nil
}

// lastAddr is the highest allocatable address: for IPv4 the one below the
// broadcast address, for IPv6 the last address of the subnet.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	if a.Is4() {
		a = a.Prev()
	}
	return a
}

// Contains reports whether a is inside r (after Canonical).
func (r Range) Contains(a netip.Addr) bool {
	a = a.Unmap()
	return r.Subnet.Contains(a) && r.RangeStart.Compare(a) <= 0 && a.Compare(r.RangeEnd) <= 0
}

func (r Range) String() string {
	return fmt.Sprintf("%s-%s", r.RangeStart, r.RangeEnd)
}

// Canonical validates every range of the set, fills in defaults, and checks
// that the ranges are of one family and do not overlap.
func (s RangeSet) Canonical() (RangeSet, error) {
	if len(s) == 0 {
		return nil, fmt.Errorf("empty range set")
	}
	out := make(RangeSet, len(s))
	for i, r := range s {
		c, err := r.Canonical()
		if err != nil {
			return nil, err
		}
		if i > 0 && c.Subnet.Addr().Is4() != out[0].Subnet.Addr().Is4() {
			return nil, fmt.Errorf("range set mixes IPv4 and IPv6 (%s, %s)", out[0].Subnet, c.Subnet)
		}
		for _, o := range out[:i] {
			if o.Contains(c.RangeStart) || o.Contains(c.RangeEnd) || c.Contains(o.RangeStart) || c.Contains(o.RangeEnd) {
				return nil, fmt.Errorf("ranges %s and %s overlap", o, c)
			}
		}
		out[i] = c
	}
	return out, nil
}

// Contains reports whether a lies in one of the set's ranges, and which.
func (s RangeSet) Contains(a netip.Addr) (int, bool) {
	for i, r := range s {
		if r.Contains(a) {
			return i, true
		}
	}
	return 0, false
}

func (s RangeSet) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}
