package cloudroutes

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/routes"
)

func TestOptionsValidate(t *testing.T) {
	fake, err := routes.NewFake(0, routes.ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr string // substring; "" means valid
	}{
		{name: "defaults", opts: Options{Table: fake, ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16")}},
		{name: "dual stack", opts: Options{Table: fake, ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16,fd00:244::/56"), ReconcilePeriod: time.Second}},
		{name: "no table", opts: Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16")}, wantErr: "Options.Table"},
		{name: "no cluster CIDR", opts: Options{Table: fake}, wantErr: "--cluster-cidr"},
		{name: "two IPv4 cluster CIDRs", opts: Options{Table: fake, ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16,10.245.0.0/16")}, wantErr: "--cluster-cidr: 10.244.0.0/16 and 10.245.0.0/16 are of the same IP family"},
		{name: "host bits", opts: Options{Table: fake, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.1/16")}}, wantErr: "--cluster-cidr: 10.244.1.1/16 has host bits set"},
		{name: "negative period", opts: Options{Table: fake, ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16"), ReconcilePeriod: -time.Second}, wantErr: "--route-reconciliation-period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				cfg, _ := tc.opts.validate()
				if cfg.period <= 0 {
					t.Errorf("period %v", cfg.period)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
	cfg, _ := Options{Table: fake, ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16")}.validate()
	if cfg.period != DefaultReconcilePeriod {
		t.Errorf("normalised config: %+v", cfg)
	}
}

func TestManaged(t *testing.T) {
	cfg, err := Options{Table: &routes.Fake{}, ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16,fd00:244::/56")}.validate()
	if err != nil {
		t.Fatal(err)
	}
	for dst, want := range map[string]bool{
		"10.244.0.0/16":     true,
		"10.244.3.0/24":     true,
		"10.244.3.7/32":     true,
		"10.0.0.0/8":        false, // contains the cluster CIDR, is not inside it
		"10.245.0.0/24":     false,
		"fd00:244:0:1::/64": true,
		"fd00:245::/64":     false,
		"0.0.0.0/0":         false,
	} {
		if got := cfg.managed(netip.MustParsePrefix(dst)); got != want {
			t.Errorf("managed(%s) = %v, want %v", dst, got, want)
		}
	}
}
