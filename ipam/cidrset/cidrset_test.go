package cidrset

import (
	"errors"
	"net/netip"
	"testing"
)

func mustSet(t *testing.T, cidr string, mask int) *Set {
	t.Helper()
	s, err := New(netip.MustParsePrefix(cidr), mask)
	if err != nil {
		t.Fatalf("New(%s, %d): %v", cidr, mask, err)
	}
	return s
}

func TestNewRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		cidr netip.Prefix
		mask int
	}{
		{"zero prefix", netip.Prefix{}, 24},
		{"mask smaller than cluster", netip.MustParsePrefix("10.244.0.0/16"), 8},
		{"mask beyond address length", netip.MustParsePrefix("10.244.0.0/16"), 33},
		{"too many IPv4 subnets", netip.MustParsePrefix("10.0.0.0/8"), 29},
		{"too many IPv6 subnets", netip.MustParsePrefix("fd00::/48"), 96},
		{"IPv4-mapped IPv6", netip.MustParsePrefix("::ffff:10.0.0.0/104"), 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := New(tc.cidr, tc.mask); err == nil {
				t.Fatalf("New accepted it: %d subnets", s.Size())
			} else {
				t.Log(err)
			}
		})
	}
}

func TestNewMasksClusterCIDR(t *testing.T) {
	s := mustSet(t, "10.244.7.0/16", 24)
	if got := s.ClusterCIDR().String(); got != "10.244.0.0/16" {
		t.Errorf("ClusterCIDR() = %s", got)
	}
	if s.Size() != 256 || s.MaskSize() != 24 || s.InUse() != 0 {
		t.Errorf("Size %d MaskSize %d InUse %d", s.Size(), s.MaskSize(), s.InUse())
	}
	if _, err := New(netip.MustParsePrefix("10.0.0.0/8"), 28); err != nil {
		t.Errorf("2^20 subnets refused: %v", err)
	}
}

func TestAllocateIPv4AllThenFull(t *testing.T) {
	s := mustSet(t, "10.244.0.0/16", 24)
	for i := range 256 {
		p, err := s.Allocate()
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		want := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
		if p != want {
			t.Fatalf("allocation %d = %s, want %s (in order)", i, p, want)
		}
	}
	if s.InUse() != 256 {
		t.Errorf("InUse = %d", s.InUse())
	}
	_, err := s.Allocate()
	if !IsFull(err) || !errors.Is(err, ErrFull) {
		t.Fatalf("allocation past the end: err = %v, want ErrFull", err)
	}
	if IsOutside(err) {
		t.Error("ErrFull also matches IsOutside")
	}
}

func TestReleaseAndReuseNextFit(t *testing.T) {
	s := mustSet(t, "10.244.0.0/22", 24)
	var got []netip.Prefix
	for range 4 {
		p, err := s.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	// Free the second and the fourth: next fit resumes after the last
	// allocation, wraps, and finds the second first.
	for _, p := range []netip.Prefix{got[1], got[3]} {
		if err := s.Release(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Release(got[1]); err != nil {
		t.Errorf("second release of a free subnet: %v", err)
	}
	if s.InUse() != 2 {
		t.Fatalf("InUse = %d after two releases, want 2", s.InUse())
	}
	for _, want := range []netip.Prefix{got[1], got[3]} {
		p, err := s.Allocate()
		if err != nil || p != want {
			t.Fatalf("Allocate = %s, %v; want %s", p, err, want)
		}
	}
	if _, err := s.Allocate(); !IsFull(err) {
		t.Fatalf("err = %v, want ErrFull", err)
	}
}

func TestNextFitSpreads(t *testing.T) {
	s := mustSet(t, "10.244.0.0/16", 24)
	a, _ := s.Allocate()
	if err := s.Release(a); err != nil {
		t.Fatal(err)
	}
	b, _ := s.Allocate()
	if a == b {
		t.Fatalf("just-released %s handed out again at once", a)
	}
}

func TestOccupyThenAllocateSkips(t *testing.T) {
	s := mustSet(t, "10.244.0.0/22", 24)
	occupied := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("10.244.2.0/24")}
	for _, p := range occupied {
		if err := s.Occupy(p); err != nil {
			t.Fatal(err)
		}
		if err := s.Occupy(p); err != nil {
			t.Fatalf("occupy twice: %v", err)
		}
	}
	if s.InUse() != 2 || !s.Has(occupied[0]) || s.Has(netip.MustParsePrefix("10.244.1.0/24")) {
		t.Fatalf("InUse %d after occupying two", s.InUse())
	}
	var got []string
	for range 2 {
		p, err := s.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.String())
	}
	if got[0] != "10.244.1.0/24" || got[1] != "10.244.3.0/24" {
		t.Fatalf("allocated %v, want the two free ones", got)
	}
	if _, err := s.Allocate(); !IsFull(err) {
		t.Fatalf("err = %v, want ErrFull", err)
	}
}

func TestOccupyRefusesMisfits(t *testing.T) {
	s := mustSet(t, "10.244.0.0/16", 24)
	for _, tc := range []struct {
		prefix  string
		outside bool
	}{
		{"10.245.0.0/24", true},
		{"10.243.255.0/24", true},
		{"fd00::/64", true},
		{"::ffff:10.244.1.0/120", true},
		{"10.244.1.0/25", false},
		{"10.244.0.0/23", false},
		{"10.244.1.128/24", false},
	} {
		p := netip.MustParsePrefix(tc.prefix)
		for name, f := range map[string]func(netip.Prefix) error{"Occupy": s.Occupy, "Release": s.Release} {
			err := f(p)
			if err == nil {
				t.Errorf("%s(%s) accepted", name, p)
				continue
			}
			if IsOutside(err) != tc.outside || errors.Is(err, ErrMisfit) == tc.outside {
				t.Errorf("%s(%s) = %v: outside %v, want %v", name, p, err, IsOutside(err), tc.outside)
			}
		}
	}
	if s.InUse() != 0 {
		t.Errorf("InUse = %d after refused occupies", s.InUse())
	}
}

func TestIPv6Slash64OutOfSlash48(t *testing.T) {
	s := mustSet(t, "fd00:10:244::/48", 64)
	if s.Size() != 65536 {
		t.Fatalf("Size = %d, want 65536", s.Size())
	}
	seen := map[netip.Prefix]bool{}
	for i := range 5000 {
		p, err := s.Allocate()
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if seen[p] || p.Bits() != 64 || !s.ClusterCIDR().Contains(p.Addr()) || p.Masked() != p {
			t.Fatalf("allocation %d = %s: duplicate or not a /64 of the cluster CIDR", i, p)
		}
		seen[p] = true
	}
	if p := netip.MustParsePrefix("fd00:10:244:1387::/64"); !seen[p] { // 4999 = 0x1387
		t.Errorf("%s not allocated: order is not sequential", p)
	}
	if err := s.Release(netip.MustParsePrefix("fd00:10:244:10::/64")); err != nil {
		t.Fatal(err)
	}
	if err := s.Occupy(netip.MustParsePrefix("fd00:10:244:ffff::/64")); err != nil {
		t.Fatal(err)
	}
	if s.InUse() != 5000 {
		t.Errorf("InUse = %d, want 5000", s.InUse())
	}
}

func TestIPv6FullRange(t *testing.T) {
	// Subnet bits straddling the two 64-bit halves of the address.
	s := mustSet(t, "fd00::/60", 68)
	for i := range s.Size() {
		p, err := s.Allocate()
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if err := s.Occupy(p); err != nil {
			t.Fatalf("occupy own allocation %s: %v", p, err)
		}
	}
	last := netip.MustParsePrefix("fd00:0:0:f:f000::/68")
	if !s.Has(last) {
		t.Errorf("%s not allocated", last)
	}
	if _, err := s.Allocate(); !IsFull(err) {
		t.Fatalf("err = %v, want ErrFull", err)
	}
}

func TestIPv4Slash24OutOfSlash16(t *testing.T) {
	s := mustSet(t, "192.168.0.0/16", 24)
	if err := s.Occupy(netip.MustParsePrefix("192.168.255.0/24")); err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Prefix]bool{}
	for range 255 {
		p, err := s.Allocate()
		if err != nil {
			t.Fatal(err)
		}
		seen[p] = true
	}
	if len(seen) != 255 || seen[netip.MustParsePrefix("192.168.255.0/24")] {
		t.Fatalf("%d distinct, occupied one handed out: %v", len(seen), seen[netip.MustParsePrefix("192.168.255.0/24")])
	}
	if _, err := s.Allocate(); !IsFull(err) {
		t.Fatalf("err = %v, want ErrFull", err)
	}
}

func TestHostAndSingleSubnet(t *testing.T) {
	s := mustSet(t, "10.0.0.0/30", 32)
	for i := range 4 {
		if p, err := s.Allocate(); err != nil || p.Addr() != netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}) {
			t.Fatalf("allocation %d = %s, %v", i, p, err)
		}
	}
	one := mustSet(t, "10.0.0.0/24", 24)
	if p, err := one.Allocate(); err != nil || p.String() != "10.0.0.0/24" {
		t.Fatalf("single subnet: %s, %v", p, err)
	}
	if _, err := one.Allocate(); !IsFull(err) {
		t.Fatalf("err = %v, want ErrFull", err)
	}
}

func BenchmarkAllocateNearlyFull(b *testing.B) {
	s, _ := New(netip.MustParsePrefix("10.0.0.0/8"), 28)
	for range s.Size() - 1 {
		if _, err := s.Allocate(); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		p, err := s.Allocate()
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(p); err != nil {
			b.Fatal(err)
		}
	}
}
