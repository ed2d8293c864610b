package allocator

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"sync"
)

// IPRange is a Service ClusterIP range. The network address (and for IPv4 the
// broadcast address) is never handed out.
type IPRange struct {
	prefix netip.Prefix
	size   uint64 // usable addresses, capped for huge IPv6 ranges
}

// maxRangeSize caps how many addresses of a large IPv6 range are used, the
// way kube-apiserver refuses ranges wider than 20 host bits.
const maxRangeSize = 1 << 20

// NewIPRange makes the range of a CIDR such as 10.96.0.0/12 or
// fd00:10:96::/108.
func NewIPRange(p netip.Prefix) (*IPRange, error) {
	if !p.IsValid() {
		return nil, fmt.Errorf("service CIDR %v is not a valid CIDR", p)
	}
	if p.Masked() != p {
		return nil, fmt.Errorf("service CIDR %s has host bits set (did you mean %s?)", p, p.Masked())
	}
	hostBits := p.Addr().BitLen() - p.Bits()
	if hostBits < 2 {
		return nil, fmt.Errorf("service CIDR %s is too small", p)
	}
	size := uint64(maxRangeSize)
	if hostBits < 21 {
		size = uint64(1)<<hostBits - 1 // minus the network address
		if p.Addr().Is4() {
			size-- // minus broadcast
		}
	}
	return &IPRange{prefix: p, size: size}, nil
}

// Prefix is the range's CIDR.
func (r *IPRange) Prefix() netip.Prefix { return r.prefix }

// Size is the number of assignable addresses.
func (r *IPRange) Size() uint64 { return r.size }

// Contains reports whether ip may be assigned from this range.
func (r *IPRange) Contains(ip netip.Addr) bool {
	if !r.prefix.Contains(ip) {
		return false
	}
	off := r.offsetOf(ip)
	return off >= 1 && off <= r.size
}

// At returns the address at offset (1 = the first assignable address).
func (r *IPRange) At(offset uint64) netip.Addr {
	base := new(big.Int).SetBytes(r.prefix.Addr().AsSlice())
	base.Add(base, new(big.Int).SetUint64(offset))
	b := base.Bytes()
	buf := make([]byte, r.prefix.Addr().BitLen()/8)
	copy(buf[len(buf)-len(b):], b)
	addr, _ := netip.AddrFromSlice(buf)
	return addr
}

func (r *IPRange) offsetOf(ip netip.Addr) uint64 {
	a := new(big.Int).SetBytes(ip.AsSlice())
	a.Sub(a, new(big.Int).SetBytes(r.prefix.Addr().AsSlice()))
	if !a.IsUint64() {
		return 0
	}
	return a.Uint64()
}

// Pick returns a random free address, or false when the range is full.
func (r *IPRange) Pick(taken *Set) (netip.Addr, bool) {
	off, ok := pick(r.size, func(o uint64) bool { return taken.Has(r.At(o + 1).String()) })
	if !ok {
		return netip.Addr{}, false
	}
	return r.At(off + 1), true
}

// PortRange is a NodePort range such as 30000-32767.
type PortRange struct {
	Base, Size int
}

// ParsePortRange parses "30000-32767".
func ParsePortRange(s string) (PortRange, error) {
	var lo, hi int
	if _, err := fmt.Sscanf(s, "%d-%d", &lo, &hi); err != nil {
		return PortRange{}, fmt.Errorf("parse port range %q: want LOW-HIGH", s)
	}
	p := PortRange{Base: lo, Size: hi - lo + 1}
	if err := p.Validate(); err != nil {
		return PortRange{}, err
	}
	return p, nil
}

// Validate reports whether p is a usable range of ports.
func (p PortRange) Validate() error {
	if p.Base < 1 || p.Size < 1 || p.Base+p.Size-1 > 65535 {
		return fmt.Errorf("port range %s: want 1 <= LOW <= HIGH <= 65535", p)
	}
	return nil
}

func (p PortRange) String() string { return fmt.Sprintf("%d-%d", p.Base, p.Base+p.Size-1) }

// Contains reports whether port lies in the range.
func (p PortRange) Contains(port int) bool { return port >= p.Base && port < p.Base+p.Size }

// Pick returns a random free port, or false when the range is full.
func (p PortRange) Pick(taken *Set) (int, bool) {
	off, ok := pick(uint64(p.Size), func(o uint64) bool { return taken.Has(fmt.Sprint(p.Base + int(o))) })
	return p.Base + int(off), ok
}

// pick starts at a random offset and probes forward, so a nearly full range
// still finds its last free value in one pass.
func pick(size uint64, isTaken func(uint64) bool) (uint64, bool) {
	if size == 0 {
		return 0, false
	}
	start := rand.Uint64N(size)
	for i := uint64(0); i < size; i++ {
		o := (start + i) % size
		if !isTaken(o) {
			return o, true
		}
	}
	return 0, false
}

// Set is the allocator's (possibly stale) view of taken values. It is only a
// hint: the storage transaction has the last word.
type Set struct {
	mu sync.RWMutex
	m  map[string]struct{}
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{m: map[string]struct{}{}} }

// Has reports whether v is taken.
func (s *Set) Has(v string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.m[v]
	return ok
}

// Add marks values taken.
func (s *Set) Add(vs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range vs {
		s.m[v] = struct{}{}
	}
}

// Remove marks values free.
func (s *Set) Remove(vs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range vs {
		delete(s.m, v)
	}
}

// Replace swaps in a fresh view.
func (s *Set) Replace(vs []string) {
	m := make(map[string]struct{}, len(vs))
	for _, v := range vs {
		m[v] = struct{}{}
	}
	s.mu.Lock()
	s.m = m
	s.mu.Unlock()
}

// Len is the number of taken values.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m)
}
