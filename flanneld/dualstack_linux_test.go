package flanneld

import (
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/subnetenv"
)

// TestDualStack: two dual-stack nodes per backend; pods ping each other
// over IPv4 and IPv6, subnet.env carries both families, and the IPv6
// masquerade rules are in ip6tables.
func TestDualStack(t *testing.T) {
	nettest.SkipShort(t, "daemons on several node namespaces")
	nettest.RequirePrivileged(t)
	api := testapi.Start(t)
	startIPAM(t, api, "10.247.0.0/16", "fd00:10:247::/56")
	for _, tc := range []struct{ name, backend, dev6 string }{
		{"hostgw", "host-gw", ""},
		{"vxlan", "vxlan", "flannel-v6.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := `{"Network":"10.247.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:247::/56","Backend":{"Type":"` + tc.backend + `"}}`
			c := newTestClusterDual(t, api, conf, 2, true)
			for _, nd := range c.nodes {
				c.start(nd)
				c.wirePod(nd)
			}
			n1, n2 := c.nodes[0], c.nodes[1]
			mustPing(t, n1.pod, n2.podIP)
			mustPing(t, n1.pod, n2.pod6)
			mustPing(t, n2.pod, n1.pod6)
			env, err := subnetenv.Read(n1.d.opts.SubnetFile)
			if err != nil || env.IPv6Subnet.Masked() != c.subnet6(n1) || env.Subnet.Masked() != c.subnet(n1) {
				t.Fatalf("subnet.env %+v (%v)", env, err)
			}
			if tc.dev6 != "" {
				l, err := n1.ns.Handle().LinkByName(tc.dev6)
				if err != nil || l.Attrs().MTU != 1430 {
					t.Fatalf("%s: %v (%v)", tc.dev6, l, err)
				}
				if env.MTU != 1430 {
					t.Fatalf("FLANNEL_MTU %d, want the smaller device MTU 1430", env.MTU)
				}
			}
			if out := string(n1.ns.MustExec(t, "ip6tables-save", "-t", "nat")); !strings.Contains(out, "-A NODENET-FLANNEL-MASQ -s fd00:10:247::/56 ! -d ff00::/8") {
				t.Fatalf("ip6tables nat:\n%s", out)
			}
		})
	}
}
