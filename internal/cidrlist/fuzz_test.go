package cidrlist

import (
	"slices"
	"testing"
)

// FuzzParse holds the CIDR-list flags (--cluster-cidr, --lb-ip-pool,
// --nodeport-addresses, --service-cluster-ip-range) to: no panic under any
// rule, what Parse accepts passes Check, and Join's rendering parses back
// to the same list.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"10.244.0.0/16", "10.244.0.0/16,fd00:10:244::/56", "10.244.1.0/16", "172.30.0.224/28, 172.30.1.0/24",
		"::ffff:10.0.0.0/104", "10.0.0.0/8,10.1.0.0/16", ",,", "fe80::/64%eth0", "1.2.3.4/33",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, r := range []Rule{DualStack, Pools, Any} {
			ps, err := Parse([]string{v}, r)
			if err != nil {
				continue
			}
			if err := Check(ps, r); err != nil {
				t.Fatalf("Parse(%q, %+v) accepted %v, Check refuses it: %v", v, r, ps, err)
			}
			back, err := Parse([]string{Join(ps)}, r)
			if err != nil || !slices.Equal(back, ps) {
				t.Fatalf("Join(%v) = %q parses to %v, %v", ps, Join(ps), back, err)
			}
		}
	})
}
