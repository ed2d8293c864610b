package allocator

import (
	"net/netip"
	"strconv"
	"testing"
)

func TestIPRangeSizeAndBounds(t *testing.T) {
	r, err := NewIPRange(netip.MustParsePrefix("10.96.0.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != 6 {
		t.Fatalf("size = %d, want 6 (8 minus network and broadcast)", r.Size())
	}
	for _, tc := range []struct {
		ip   string
		want bool
	}{{"10.96.0.0", false}, {"10.96.0.1", true}, {"10.96.0.6", true}, {"10.96.0.7", false}, {"10.96.0.8", false}} {
		if got := r.Contains(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("Contains(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
}

func TestIPRangePickExhausts(t *testing.T) {
	r, _ := NewIPRange(netip.MustParsePrefix("10.96.0.0/29"))
	taken := NewSet()
	seen := map[netip.Addr]bool{}
	for i := 0; i < 6; i++ {
		ip, ok := r.Pick(taken)
		if !ok {
			t.Fatalf("range full after %d picks", i)
		}
		if seen[ip] || !r.Contains(ip) {
			t.Fatalf("pick %d returned %s (duplicate or out of range)", i, ip)
		}
		seen[ip] = true
		taken.Add(ip.String())
	}
	if ip, ok := r.Pick(taken); ok {
		t.Fatalf("full range handed out %s", ip)
	}
}

func TestIPv6Range(t *testing.T) {
	r, err := NewIPRange(netip.MustParsePrefix("fd00:10:96::/112"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != 65535 {
		t.Fatalf("size = %d", r.Size())
	}
	if got := r.At(1).String(); got != "fd00:10:96::1" {
		t.Fatalf("At(1) = %s", got)
	}
	if _, err := NewIPRange(netip.MustParsePrefix("fd00:10:96::1/112")); err == nil {
		t.Fatal("host bits set: want error")
	}
	if _, err := NewIPRange(netip.Prefix{}); err == nil {
		t.Fatal("garbage: want error")
	}
}

func TestPortRange(t *testing.T) {
	p, err := ParsePortRange("30000-30002")
	if err != nil {
		t.Fatal(err)
	}
	taken := NewSet()
	for i := 0; i < 3; i++ {
		port, ok := p.Pick(taken)
		if !ok || !p.Contains(port) {
			t.Fatalf("pick %d: %d %v", i, port, ok)
		}
		taken.Add(itoa(port))
	}
	if _, ok := p.Pick(taken); ok {
		t.Fatal("full port range handed out a port")
	}
	for _, bad := range []string{"1-0", "0-10", "30000", "1-70000"} {
		if _, err := ParsePortRange(bad); err == nil {
			t.Errorf("ParsePortRange(%q): want error", bad)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
