package routes

import (
	"errors"
	"testing"
)

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

func TestRouteString(t *testing.T) {
	for _, tc := range []struct {
		r    Route
		want string
	}{
		{Route{Dst: pfx("10.244.1.0/24"), Gw: ip("192.168.50.11")}, "10.244.1.0/24 via 192.168.50.11"},
		{Route{Dst: pfx("fd00::/64"), Dev: "eth0", Table: 100, Protocol: ProtocolNodenet}, "fd00::/64 dev eth0 proto 78 table 100"},
		{Route{}, "invalid Prefix"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestRouteValidate(t *testing.T) {
	for _, tc := range []struct {
		r  Route
		ok bool
	}{
		{Route{Dst: pfx("10.244.1.0/24"), Gw: ip("192.168.50.11")}, true},
		{Route{Dst: pfx("10.244.1.0/24"), Dev: "eth0"}, true},
		{Route{Dst: pfx("0.0.0.0/0"), Gw: ip("192.168.50.1")}, true},
		{Route{Dst: pfx("fd00::/64"), Gw: ip("fe80::1%eth0")}, false}, // zones are not expressible
		{Route{Dst: pfx("10.244.1.1/24"), Gw: ip("192.168.50.11")}, false},
		{Route{Dst: pfx("::ffff:10.244.1.0/120"), Gw: ip("192.168.50.11")}, false},
		{Route{Dst: pfx("10.244.1.0/24"), Gw: ip("::ffff:192.168.50.11")}, false},
		{Route{Dst: pfx("10.244.1.0/24"), Gw: ip("fd00::1")}, false},
		{Route{Dst: pfx("10.244.1.0/24")}, false},
		{Route{Gw: ip("192.168.50.11")}, false},
	} {
		err := tc.r.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%s) = %v, want ok=%v", tc.r, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%s) = %v, not ErrInvalid", tc.r, err)
		}
	}
}
