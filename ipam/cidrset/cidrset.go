package cidrset

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
)

// MaxSubnetBits caps the number of subnets of a Set at 2^MaxSubnetBits
// (a 128 KiB bitmap): more than that is a mistyped mask, not a cluster.
const MaxSubnetBits = 20

var (
	// ErrFull is returned by Allocate when every subnet is in use.
	ErrFull = errors.New("no subnet available in the cluster CIDR")
	// ErrOutside is returned for a prefix that is not inside the cluster
	// CIDR, including one of the other IP family.
	ErrOutside = errors.New("prefix outside the cluster CIDR")
	// ErrMisfit is returned for a prefix inside the cluster CIDR that is not
	// one of the Set's subnets: of another size, or not aligned to it.
	ErrMisfit = errors.New("prefix is not a subnet of the set")
)

// IsFull reports whether err means the Set is exhausted.
func IsFull(err error) bool { return errors.Is(err, ErrFull) }

// IsOutside reports whether err means a prefix outside the cluster CIDR.
func IsOutside(err error) bool { return errors.Is(err, ErrOutside) }

// Set allocates subnets of one size out of a cluster CIDR. It is not safe
// for concurrent use: callers that share one guard it with their own lock
// (they usually need to update more state atomically with it anyway).
type Set struct {
	cluster  netip.Prefix
	maskSize int
	shift    uint // host bits of a subnet: its index is shifted by this much
	size     int
	used     []uint64
	inUse    int
	next     int // next-fit cursor: where the next scan starts
}

// New returns an empty Set of /maskSize subnets of clusterCIDR. A
// clusterCIDR with host bits set is taken as its network (10.244.1.0/16 is
// 10.244.0.0/16), as kube-controller-manager does.
func New(clusterCIDR netip.Prefix, maskSize int) (*Set, error) {
	if !clusterCIDR.IsValid() {
		return nil, fmt.Errorf("cluster CIDR %q: malformed prefix", clusterCIDR)
	}
	if clusterCIDR.Addr().Is4In6() {
		return nil, fmt.Errorf("cluster CIDR %s: IPv4-mapped IPv6 prefixes are ambiguous; write the IPv4 prefix", clusterCIDR)
	}
	if clusterCIDR.Addr().Zone() != "" {
		return nil, fmt.Errorf("cluster CIDR %s: zoned addresses are not allowed", clusterCIDR)
	}
	clusterCIDR = clusterCIDR.Masked()
	addrBits := clusterCIDR.Addr().BitLen()
	if maskSize < clusterCIDR.Bits() || maskSize > addrBits {
		return nil, fmt.Errorf("subnet mask /%d for cluster CIDR %s: must be between /%d and /%d",
			maskSize, clusterCIDR, clusterCIDR.Bits(), addrBits)
	}
	subnetBits := maskSize - clusterCIDR.Bits()
	if subnetBits > MaxSubnetBits {
		return nil, fmt.Errorf("subnet mask /%d for cluster CIDR %s: 2^%d subnets, more than the limit of 2^%d",
			maskSize, clusterCIDR, subnetBits, MaxSubnetBits)
	}
	size := 1 << subnetBits
	return &Set{
		cluster:  clusterCIDR,
		maskSize: maskSize,
		shift:    uint(addrBits - maskSize),
		size:     size,
		used:     make([]uint64, (size+63)/64),
	}, nil
}

// ClusterCIDR returns the prefix the Set carves subnets from.
func (s *Set) ClusterCIDR() netip.Prefix { return s.cluster }

// MaskSize returns the prefix length of the Set's subnets.
func (s *Set) MaskSize() int { return s.maskSize }

// Size returns how many subnets the Set has in total.
func (s *Set) Size() int { return s.size }

// InUse returns how many subnets are allocated or occupied.
func (s *Set) InUse() int { return s.inUse }

// Allocate marks the next free subnet as used and returns it, or ErrFull.
func (s *Set) Allocate() (netip.Prefix, error) {
	i, ok := s.nextFree()
	if !ok {
		return netip.Prefix{}, fmt.Errorf("allocate /%d from %s (%d in use): %w", s.maskSize, s.cluster, s.inUse, ErrFull)
	}
	s.mark(i)
	s.next = (i + 1) % s.size
	return s.prefix(i), nil
}

// Occupy marks p as used, e.g. because a node already holds it. Occupying a
// subnet that is already used is not an error: rebuilding from the API may
// see the same node more than once.
func (s *Set) Occupy(p netip.Prefix) error {
	i, err := s.index(p)
	if err != nil {
		return fmt.Errorf("occupy %s: %w", p, err)
	}
	if !s.isUsed(i) {
		s.mark(i)
	}
	return nil
}

// Release marks p as free. Releasing a free subnet is not an error, so a
// repeated delete event cannot fail.
func (s *Set) Release(p netip.Prefix) error {
	i, err := s.index(p)
	if err != nil {
		return fmt.Errorf("release %s: %w", p, err)
	}
	if s.isUsed(i) {
		s.used[i/64] &^= 1 << (i % 64)
		s.inUse--
	}
	return nil
}

// Has reports whether p is one of the Set's subnets and in use.
func (s *Set) Has(p netip.Prefix) bool {
	i, err := s.index(p)
	return err == nil && s.isUsed(i)
}

func (s *Set) isUsed(i int) bool { return s.used[i/64]&(1<<(i%64)) != 0 }

func (s *Set) mark(i int) {
	s.used[i/64] |= 1 << (i % 64)
	s.inUse++
}

// nextFree scans whole words from the cursor, wrapping once, so a nearly
// full /8-sized set costs a few thousand word tests, not a million bit tests.
func (s *Set) nextFree() (int, bool) {
	if s.inUse >= s.size {
		return 0, false
	}
	words := len(s.used)
	start := s.next / 64
	for n := 0; n <= words; n++ {
		w := (start + n) % words
		free := ^s.used[w]
		if n == 0 {
			// First word: only bits at or after the cursor, the ones
			// before it are scanned last, on wrap-around (n == words).
			free &= ^uint64(0) << (s.next % 64)
		} else if n == words {
			free = ^s.used[w] & (1<<(s.next%64) - 1)
		}
		for free != 0 {
			i := w*64 + bits.TrailingZeros64(free)
			if i < s.size {
				return i, true
			}
			free &= free - 1
		}
	}
	return 0, false
}

// index returns the bit of p, checking that p is exactly one of the subnets.
func (s *Set) index(p netip.Prefix) (int, error) {
	if !p.IsValid() {
		return 0, fmt.Errorf("malformed prefix: %w", ErrMisfit)
	}
	if p.Addr().Is4() != s.cluster.Addr().Is4() || p.Addr().Is4In6() || !s.cluster.Contains(p.Addr()) {
		return 0, fmt.Errorf("%w %s", ErrOutside, s.cluster)
	}
	if p.Bits() != s.maskSize {
		return 0, fmt.Errorf("size /%d, want /%d: %w", p.Bits(), s.maskSize, ErrMisfit)
	}
	if p.Masked() != p {
		return 0, fmt.Errorf("host bits set (network is %s): %w", p.Masked(), ErrMisfit)
	}
	hi, lo := split(p.Addr())
	bhi, blo := split(s.cluster.Addr())
	hi, lo = hi^bhi, lo^blo // the subnet bits only: the base is aligned
	var idx uint64
	if s.shift >= 64 {
		idx = hi >> (s.shift - 64)
	} else {
		idx = lo>>s.shift | hi<<(64-s.shift)
	}
	return int(idx), nil
}

// prefix returns subnet i: the base address with i in the subnet bits.
func (s *Set) prefix(i int) netip.Prefix {
	hi, lo := split(s.cluster.Addr())
	idx := uint64(i)
	if s.shift >= 64 {
		hi |= idx << (s.shift - 64)
	} else {
		lo |= idx << s.shift
		hi |= idx >> (64 - s.shift) // 0 for shift 0: Go defines x>>64 == 0
	}
	return netip.PrefixFrom(join(hi, lo, s.cluster.Addr().Is4()), s.maskSize)
}

func split(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	return hi, lo
}

func join(hi, lo uint64, is4 bool) netip.Addr {
	var b [16]byte
	for i := 7; i >= 0; i-- {
		b[i], b[8+i] = byte(hi), byte(lo)
		hi, lo = hi>>8, lo>>8
	}
	a := netip.AddrFrom16(b)
	if is4 {
		return a.Unmap()
	}
	return a
}
