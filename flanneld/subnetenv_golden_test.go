package flanneld

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// TestSubnetEnvMatchesUpstream writes subnet.env through the daemon's own
// publish step and byte-compares it with golden files.
//
// The golden files are what upstream flannel's writer produces for the same
// inputs: pkg/subnet/subnetfile_unix.go, WriteSubnetFile, in flannel
// v0.28.x, which writes (each with fmt.Fprintf and "\n"):
// FLANNEL_NETWORK=<config.Network> and FLANNEL_SUBNET=<sn after
// IncrementIP> when EnableIPv4; FLANNEL_IPV6_NETWORK and
// FLANNEL_IPV6_SUBNET likewise when EnableIPv6; then FLANNEL_MTU=%d and
// FLANNEL_IPMASQ=%v. IP4Net/IP6Net print as <ip>/<len>, IPs in Go's
// canonical form. The files were written by hand from that code (the
// module is not a dependency of nodenet); regenerate them by calling
// subnet.WriteSubnetFile with the inputs below if upstream ever changes.
func TestSubnetEnvMatchesUpstream(t *testing.T) {
	for _, tc := range []struct {
		golden          string
		conf            string
		subnet, subnet6 string
		mtu             int
		masq            bool
	}{
		{"subnet-v4.env.golden", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, "10.244.1.0/24", "", 1450, true},
		{"subnet-v6.env.golden", `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`, "", "fd00:10:244:1::/64", 1430, false},
		{"subnet-dual.env.golden", `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"host-gw"}}`, "10.244.7.0/24", "fd00:10:244:7::/64", 1500, true},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			dir := t.TempDir()
			conf := filepath.Join(dir, "net-conf.json")
			if err := os.WriteFile(conf, []byte(tc.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			d := newTestDaemon(t, Options{NetConfPath: conf, SubnetFile: filepath.Join(dir, "run", "subnet.env"), IPMasq: tc.masq})
			var own Lease
			if tc.subnet != "" {
				own.Subnet = netip.MustParsePrefix(tc.subnet)
			}
			if tc.subnet6 != "" {
				own.IPv6Subnet = netip.MustParsePrefix(tc.subnet6)
			}
			if err := d.publish(own, tc.mtu); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(d.opts.SubnetFile)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("testdata", tc.golden))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("subnet.env differs from upstream's:\ngot:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
