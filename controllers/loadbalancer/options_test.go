package loadbalancer

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// TestOptionsValidate: typed pools must be non-empty, canonical and
// disjoint; New refuses what Validate refuses. (Parsing the flag's text is
// cidrlist's and cmd/nodenet's job.)
func TestOptionsValidate(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		pools []netip.Prefix
		want  string
	}{
		{nil, "at least one"},
		{[]netip.Prefix{{}}, "not a valid CIDR"},
		{[]netip.Prefix{p("192.0.2.1/24")}, "host bits"},
		{[]netip.Prefix{p("192.0.2.0/24"), p("192.0.2.128/25")}, "overlaps"},
		{[]netip.Prefix{p("2001:db8::/64"), p("2001:db8::/48")}, "overlaps"},
		{[]netip.Prefix{p("::ffff:192.0.2.0/120")}, "IPv4-mapped"},
	} {
		err := Options{Pools: tc.pools}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--lb-ip-pool") {
			t.Errorf("pools %v: err %v, want one naming --lb-ip-pool and containing %q", tc.pools, err, tc.want)
		}
		client := fake.NewClientset()
		if _, nerr := New(client, informers.NewSharedInformerFactory(client, 0), Options{Pools: tc.pools}, nil, nil); fmt.Sprint(nerr) != fmt.Sprint(err) {
			t.Errorf("pools %v: New err %v, want Validate's %v", tc.pools, nerr, err)
		}
	}
	client := fake.NewClientset()
	if _, err := New(client, informers.NewSharedInformerFactory(client, 0), Options{Pools: []netip.Prefix{p("192.0.2.0/24"), p("2001:db8::/64")}}, nil, nil); err != nil {
		t.Errorf("valid dual-stack pools refused: %v", err)
	}
}

func TestAllocatorSkipsSpecialAddresses(t *testing.T) {
	for _, tc := range []struct {
		pool string
		want []string
	}{
		{"192.0.2.0/30", []string{"192.0.2.1", "192.0.2.2"}},
		{"192.0.2.4/31", []string{"192.0.2.4", "192.0.2.5"}},
		{"192.0.2.9/32", []string{"192.0.2.9"}},
		{"2001:db8::/126", []string{"2001:db8::1", "2001:db8::2", "2001:db8::3"}},
		{"2001:db8::8/127", []string{"2001:db8::8", "2001:db8::9"}},
	} {
		p := netip.MustParsePrefix(tc.pool)
		a := newAllocator([]netip.Prefix{p})
		var got []string
		for i := 0; ; i++ {
			addr, ok := a.next(familyOf(p.Addr()))
			if !ok {
				break
			}
			a.assign(string(rune('a'+i)), addr)
			got = append(got, addr.String())
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("pool %s hands out %v, want %v", tc.pool, got, tc.want)
		}
	}
}

func TestLastAddr(t *testing.T) {
	for pool, want := range map[string]string{
		"10.0.0.0/8":     "10.255.255.255",
		"192.0.2.0/30":   "192.0.2.3",
		"192.0.2.64/26":  "192.0.2.127",
		"2001:db8::/124": "2001:db8::f",
		"2001:db8::/60":  "2001:db8:0:f:ffff:ffff:ffff:ffff",
	} {
		if got := lastAddr(netip.MustParsePrefix(pool)).String(); got != want {
			t.Errorf("lastAddr(%s) = %s, want %s", pool, got, want)
		}
	}
}

func TestAllocatorReleaseAndReplace(t *testing.T) {
	a := newAllocator([]netip.Prefix{netip.MustParsePrefix("192.0.2.0/29"), netip.MustParsePrefix("2001:db8::/64")})
	a.assign("ns/a", netip.MustParseAddr("192.0.2.3"))
	a.assign("ns/a", netip.MustParseAddr("2001:db8::5"))
	a.assign("ns/a", netip.MustParseAddr("192.0.2.4")) // replaces .3
	if _, taken := a.holder(netip.MustParseAddr("192.0.2.3")); taken {
		t.Error("replaced address still held")
	}
	if got, _ := a.heldBy("ns/a", corev1.IPv6Protocol); got.String() != "2001:db8::5" {
		t.Errorf("IPv6 address = %s, want 2001:db8::5", got)
	}
	if !a.releaseAll("ns/a") || len(a.owner) != 0 || len(a.held) != 0 {
		t.Errorf("releaseAll left owner=%v held=%v", a.owner, a.held)
	}
}
