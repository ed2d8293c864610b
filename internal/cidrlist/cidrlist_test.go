package cidrlist

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		rule   Rule
		want   []netip.Prefix
	}{
		{"empty", nil, DualStack, nil},
		{"blank elements ignored", []string{"", " , "}, DualStack, nil},
		{"single stack", []string{"10.244.0.0/16"}, DualStack, prefixes("10.244.0.0/16")},
		{"dual stack in one value", []string{"10.244.0.0/16,fd00:10:244::/56"}, DualStack, prefixes("10.244.0.0/16", "fd00:10:244::/56")},
		{"dual stack, IPv6 primary, repeated flag", []string{" fd00:10:244::/56 ", "10.244.0.0/16"}, DualStack, prefixes("fd00:10:244::/56", "10.244.0.0/16")},
		{"host bits cleared", []string{"10.244.1.0/16"}, DualStack, prefixes("10.244.0.0/16")},
		{"pools of both families", []string{"192.0.2.0/24,198.51.100.0/24", "2001:db8::/64"}, Pools, prefixes("192.0.2.0/24", "198.51.100.0/24", "2001:db8::/64")},
		{"any: overlaps and host bits", []string{"10.0.0.0/8,10.1.2.3/16"}, Any, prefixes("10.0.0.0/8", "10.1.0.0/16")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.values, tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Parse(%q) = %v, want %v", tc.values, got, tc.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		rule   Rule
		want   string
	}{
		{"not a CIDR", []string{"10.244.0.0"}, DualStack, `"10.244.0.0" is not a CIDR`},
		{"garbage after a good one", []string{"10.244.0.0/16,bogus"}, Any, `"bogus" is not a CIDR`},
		{"IPv4-mapped", []string{"::ffff:10.0.0.0/104"}, Any, "IPv4-mapped"},
		{"two IPv4", []string{"10.244.0.0/16", "10.245.0.0/16"}, DualStack, "same IP family"},
		{"two IPv6", []string{"fd00:1::/48,fd00:2::/48"}, DualStack, "same IP family"},
		{"overlapping same family", []string{"10.244.0.0/16,10.244.8.0/24"}, DualStack, "same IP family"},
		{"three", []string{"10.244.0.0/16,fd00::/48,10.1.0.0/16"}, DualStack, "at most two"},
		{"pool host bits", []string{"172.30.0.225/28"}, Pools, "host bits set (did you mean 172.30.0.224/28?)"},
		{"pools overlap", []string{"192.0.2.0/24", "192.0.2.128/25"}, Pools, "192.0.2.128/25 overlaps 192.0.2.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.values, tc.rule)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%q) = %v, %v; want an error containing %q", tc.values, got, err, tc.want)
			}
		})
	}
}

// TestCheck covers what only typed options can hold: values Parse never
// produces, because it masks or refuses them first.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		ps   []netip.Prefix
		rule Rule
		want string // "" = accepted
	}{
		{"dual stack", prefixes("10.244.0.0/16", "fd00::/48"), DualStack, ""},
		{"empty", nil, Pools, ""},
		{"zero prefix", []netip.Prefix{{}}, Any, "not a valid CIDR"},
		{"host bits", prefixes("10.244.1.0/16"), DualStack, "did you mean 10.244.0.0/16"},
		{"IPv4-mapped", prefixes("::ffff:10.0.0.0/104"), Pools, "IPv4-mapped"},
		{"same family", prefixes("fd00:1::/48", "fd00:2::/48"), DualStack, "same IP family"},
		{"overlap", prefixes("10.0.0.0/8", "10.1.0.0/16"), Pools, "overlaps"},
		{"overlap allowed", prefixes("10.0.0.0/8", "10.1.0.0/16"), Any, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.ps, tc.rule)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check(%v) = %v, want nil", tc.ps, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check(%v) = %v, want an error containing %q", tc.ps, err, tc.want)
			}
		})
	}
}

func TestJoinRoundTrips(t *testing.T) {
	ps := prefixes("10.244.0.0/16", "fd00:10:244::/56")
	got, err := Parse([]string{Join(ps)}, DualStack)
	if err != nil || !slices.Equal(got, ps) {
		t.Errorf("Parse(Join(%v)) = %v, %v", ps, got, err)
	}
}
