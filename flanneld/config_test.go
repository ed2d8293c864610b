package flanneld

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig([]byte(`{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.EnableIPv4 || c.EnableIPv6 || c.SubnetLen != 24 || c.Backend.VNI != 1 || c.Backend.Port != 8472 || c.Backend.TxChecksumOffload != TxChecksumAuto {
		t.Fatalf("defaults: %+v", c)
	}
	if c.SubnetMin != netip.MustParseAddr("10.244.1.0") || c.SubnetMax != netip.MustParseAddr("10.244.255.0") {
		t.Fatalf("subnet range %s-%s", c.SubnetMin, c.SubnetMax)
	}
	c, err = ParseConfig([]byte(`{"Network":"10.10.0.0/26","Backend":{"Type":"host-gw"}}`))
	if err != nil || c.SubnetLen != 28 {
		t.Fatalf("small network: %v %+v", err, c)
	}
	c, err = ParseConfig([]byte(`{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"},"Extra":1}`))
	if err != nil || c.IPv6SubnetLen != 64 || c.IPv6SubnetMin != netip.MustParseAddr("fd00:10:244:1::") || len(c.Unknown) != 1 {
		t.Fatalf("v6: %v %+v", err, c)
	}
	c, err = ParseConfig([]byte(`{"Network":"10.244.0.0/16","EnableNFTables":true}`))
	if err != nil || c.Backend.Type != BackendVXLAN || !c.EnableNFTables || c.Backend.TxChecksumOffload != TxChecksumAuto {
		t.Fatalf("no backend: %v %+v", err, c)
	}
	c, err = ParseConfig([]byte(`{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"alloc"}}`))
	if err != nil || c.Backend.Type != BackendAlloc || !c.EnableIPv6 {
		t.Fatalf("alloc: %v %+v", err, c)
	}
	for in, want := range map[string]string{"on": TxChecksumOn, "Off": TxChecksumOff, "auto": TxChecksumAuto} {
		c, err = ParseConfig(fmt.Appendf(nil, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","TxChecksumOffload":%q}}`, in))
		if err != nil || c.Backend.TxChecksumOffload != want {
			t.Fatalf("TxChecksumOffload %q: %v %+v", in, err, c)
		}
	}
}

// badConfigs are the net-conf.json mistakes and the field each error names.
var badConfigs = []struct {
	name, json, field, says string
}{
	{"bad json", `{"Network": "10.244.0.0/16",`, "", "invalid JSON at line 1"},
	{"empty", ``, "", "empty"},
	{"wrong type", `{"Network":"10.244.0.0/16","SubnetLen":"24"}`, "SubnetLen", "want int, got JSON string"},
	{"unknown backend", `{"Network":"10.244.0.0/16","Backend":{"Type":"udp"}}`, "Backend.Type", `"udp" is not supported (want host-gw, vxlan or alloc)`},
	{"backend without type", `{"Network":"10.244.0.0/16","Backend":{"VNI":4}}`, "Backend.Type", "required"},
	{"no network", `{"Backend":{"Type":"vxlan"}}`, "Network", "required"},
	{"not a cidr", `{"Network":"10.244.0.0","Backend":{"Type":"vxlan"}}`, "Network", "not a CIDR"},
	{"host bits", `{"Network":"10.244.1.0/16","Backend":{"Type":"vxlan"}}`, "Network", "host bits"},
	{"v6 in Network", `{"Network":"fd00::/48","Backend":{"Type":"vxlan"}}`, "Network", "not an IPv4 network"},
	{"subnetlen does not fit", `{"Network":"10.244.0.0/16","SubnetLen":12}`, "SubnetLen", "does not fit"},
	{"subnetlen too long", `{"Network":"10.244.0.0/16","SubnetLen":31}`, "SubnetLen", "too long"},
	{"network too small", `{"Network":"10.244.0.0/29"}`, "Network", "too small"},
	{"subnetmin outside", `{"Network":"10.244.0.0/16","SubnetMin":"10.99.0.0"}`, "SubnetMin", "not inside"},
	{"subnetmax unaligned", `{"Network":"10.244.0.0/16","SubnetMax":"10.244.9.5"}`, "SubnetMax", "boundary"},
	{"min above max", `{"Network":"10.244.0.0/16","SubnetMin":"10.244.9.0","SubnetMax":"10.244.8.0"}`, "SubnetMax", "below"},
	{"vni range", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":16777216}}`, "Backend.VNI", "outside"},
	{"port range", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","Port":70000}}`, "Backend.Port", "outside"},
	{"mtu range", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","MTU":100}}`, "Backend.MTU", "outside"},
	{"vxlan keys on host-gw", `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw","VNI":2}}`, "Backend", "vxlan settings"},
	{"tx checksum on host-gw", `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw","TxChecksumOffload":"off"}}`, "Backend", "vxlan settings"},
	{"vxlan keys on alloc", `{"Network":"10.244.0.0/16","Backend":{"Type":"alloc","DirectRouting":true}}`, "Backend", "vxlan settings; Type is alloc"},
	{"tx checksum value", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","TxChecksumOffload":"disabled"}}`, "Backend.TxChecksumOffload", "want auto, on or off"},
	{"tx checksum type", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","TxChecksumOffload":false}}`, "Backend.TxChecksumOffload", "want string"},
	{"no family", `{"EnableIPv4":false,"Backend":{"Type":"vxlan"}}`, "EnableIPv4", "no IP family"},
	{"v6 without enable", `{"Network":"10.244.0.0/16","IPv6Network":"fd00::/56"}`, "IPv6Network", "EnableIPv6"},
	{"v6 network missing", `{"Network":"10.244.0.0/16","EnableIPv6":true}`, "IPv6Network", "required"},
	{"v6 subnetlen does not fit", `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00::/56","IPv6SubnetLen":48}`, "IPv6SubnetLen", "does not fit"},
	{"multi networks", `{"Networks":["10.244.0.0/16","10.245.0.0/16"]}`, "Networks", "not supported"},
}

func TestParseConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.json))
			ce, ok := err.(*ConfigError)
			if !ok {
				t.Fatalf("got %v (%T), want a *ConfigError", err, err)
			}
			if ce.Field != tc.field || !strings.Contains(ce.Problem, tc.says) {
				t.Fatalf("got field %q problem %q; want field %q saying %q", ce.Field, ce.Problem, tc.field, tc.says)
			}
			if !IsConfigError(err) || !strings.HasPrefix(err.Error(), "net-conf.json: ") {
				t.Fatalf("error %q", err)
			}
		})
	}
}

func TestSubnetArithmetic(t *testing.T) {
	nw := netip.MustParsePrefix("fd00:10:244::/56")
	p := subnetAt(nw, 64, subnetIndex(nw, 64, netip.MustParseAddr("fd00:10:244:7::")))
	if p.String() != "fd00:10:244:7::/64" {
		t.Fatal(p)
	}
	if l := lastSubnet(netip.MustParsePrefix("10.244.0.0/16"), 24); l.String() != "10.244.255.0/24" {
		t.Fatal(l)
	}
	if n := leaseName(netip.MustParsePrefix("10.244.3.0/24")); n != "10.244.3.0-24" {
		t.Fatal(n)
	}
	if n := leaseName(netip.MustParsePrefix("fd00:10:244:7::/64")); n != "fd00-10-244-7---64" {
		t.Fatal(n)
	}
}
