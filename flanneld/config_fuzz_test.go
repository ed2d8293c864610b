package flanneld

import (
	"testing"
)

// FuzzParseConfig holds net-conf.json parsing (a ConfigMap anyone with
// access can edit) to: no panic, every refusal a *ConfigError naming the
// field, and every accepted config internally consistent — the subnet
// length inside the network's, the lease bounds inside the network.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`,
		`{"Network":"10.244.0.0/16","SubnetLen":26,"SubnetMin":"10.244.4.0","SubnetMax":"10.244.8.0","Backend":{"Type":"host-gw"}}`,
		`{"EnableIPv6":true,"IPv6Network":"fd00::/56","IPv6SubnetLen":64,"Backend":{"Type":"vxlan","VNI":4096,"Port":4789,"DirectRouting":true}}`,
		`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/48","Backend":{"Type":"alloc"}}`,
		`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","TxChecksumOffload":"off","MTU":1400}}`,
		`{"Network":"10.244.0.0/16","Networks":["10.1.0.0/16"],"Backend":{"Type":"udp"}}`,
		`{"network":"10.244.0.0/16"}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !IsConfigError(err) {
				t.Fatalf("refusal is not a *ConfigError: %v", err)
			}
			return
		}
		if c.EnableIPv4 {
			checkFamily(t, "IPv4", c.Network.Bits(), c.SubnetLen, c.Network.Contains(c.SubnetMin) && c.Network.Contains(c.SubnetMax), c.SubnetMin.Compare(c.SubnetMax) <= 0)
		}
		if c.EnableIPv6 {
			checkFamily(t, "IPv6", c.IPv6Network.Bits(), c.IPv6SubnetLen, c.IPv6Network.Contains(c.IPv6SubnetMin) && c.IPv6Network.Contains(c.IPv6SubnetMax), c.IPv6SubnetMin.Compare(c.IPv6SubnetMax) <= 0)
		}
		if c.Backend.Type == "" {
			t.Fatalf("accepted a config without a backend type: %s", data)
		}
	})
}

func checkFamily(t *testing.T, family string, networkBits, subnetLen int, boundsInside, ordered bool) {
	t.Helper()
	if subnetLen < networkBits {
		t.Fatalf("%s: subnet length %d shorter than the network's /%d", family, subnetLen, networkBits)
	}
	if !boundsInside || !ordered {
		t.Fatalf("%s: lease bounds outside the network or reversed", family)
	}
}
