package hostrouting

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	good := Config{
		PodNetworks:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		LocalSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")},
		Bridge:       "cni0",
		Uplinks:      []string{"eth0"},
	}
	if err := good.validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no pod network", func(c *Config) { c.PodNetworks = nil }, "no pod network"},
		{"no local subnet", func(c *Config) { c.LocalSubnets = nil }, "no local pod subnet"},
		{"local outside", func(c *Config) { c.LocalSubnets = []netip.Prefix{netip.MustParsePrefix("10.245.3.0/24")} }, "outside the pod networks"},
		{"local wider", func(c *Config) { c.LocalSubnets = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} }, "outside the pod networks"},
		{"host bits", func(c *Config) { c.LocalSubnets = []netip.Prefix{netip.MustParsePrefix("10.244.3.1/24")} }, "not a network prefix"},
		{"no bridge", func(c *Config) { c.Bridge = "" }, "no pod bridge"},
		{"no uplink", func(c *Config) { c.Uplinks = nil }, "no uplink"},
		{"bridge is uplink", func(c *Config) { c.Uplinks = []string{"cni0"} }, "both the pod bridge and an uplink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			err := c.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// The trie key must hold the address bytes in network order whatever the
// host's byte order: the program compares them with packet bytes.
func TestNetKeyBytes(t *testing.T) {
	k := netKey(netip.MustParsePrefix("10.244.0.0/16"))
	if k.Prefixlen != 48 || k.Family != unix.AF_INET {
		t.Fatalf("key %+v", k)
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], k.Addr[0])
	if b[0] != 10 || b[1] != 244 {
		t.Fatalf("address bytes %v, want 10.244.…", b)
	}
	k6 := netKey(netip.MustParsePrefix("fd44::/16"))
	if k6.Prefixlen != 32+16 || k6.Family != unix.AF_INET6 {
		t.Fatalf("key %+v", k6)
	}
}
