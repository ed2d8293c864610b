package main

import (
	"flag"
	"io"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxycmd"
)

// parseFlags parses args into a flag set holding one CIDR-list flag per
// rule, as the subcommands register them.
func parseFlags(args ...string) (cluster, pools []netip.Prefix, err error) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(cli.NewCIDRsFlag(&cluster, cidrlist.DualStack), "cluster-cidr", "")
	fs.Var(cli.NewCIDRsFlag(&pools, cidrlist.Pools), "lb-ip-pool", "")
	err = fs.Parse(args)
	return cluster, pools, err
}

func TestCIDRsFlag(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		args          []string
		cluster, pool []netip.Prefix
	}{
		{nil, nil, nil},
		{[]string{"--cluster-cidr", "10.244.0.0/16"}, []netip.Prefix{p("10.244.0.0/16")}, nil},
		{[]string{"--cluster-cidr=10.244.1.0/16, fd00:10:244::/56"}, []netip.Prefix{p("10.244.0.0/16"), p("fd00:10:244::/56")}, nil},
		{[]string{"--cluster-cidr", "fd00:10:244::/56", "--cluster-cidr", "10.244.0.0/16"}, []netip.Prefix{p("fd00:10:244::/56"), p("10.244.0.0/16")}, nil},
		{[]string{"--lb-ip-pool", "192.0.2.0/24,2001:db8::/64", "--lb-ip-pool", "198.51.100.0/24"}, nil, []netip.Prefix{p("192.0.2.0/24"), p("2001:db8::/64"), p("198.51.100.0/24")}},
	} {
		cluster, pool, err := parseFlags(tc.args...)
		if err != nil || !slices.Equal(cluster, tc.cluster) || !slices.Equal(pool, tc.pool) {
			t.Errorf("%q: cluster %v, pools %v, err %v; want %v, %v", tc.args, cluster, pool, err, tc.cluster, tc.pool)
		}
	}
}

// TestCIDRsFlagErrors: a bad list fails flag parsing, and the error names
// the flag and what is wrong — for a repeated flag, with the whole list.
func TestCIDRsFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-cidr", "10.244.0.0"}, `flag -cluster-cidr: "10.244.0.0" is not a CIDR`},
		{[]string{"--cluster-cidr", "10.244.0.0/16", "--cluster-cidr", "10.245.0.0/16"}, "flag -cluster-cidr: 10.244.0.0/16 and 10.245.0.0/16 are of the same IP family"},
		{[]string{"--cluster-cidr", "10.244.0.0/16,fd00::/48,10.1.0.0/16"}, "flag -cluster-cidr: 3 CIDRs given; at most two"},
		{[]string{"--cluster-cidr", "::ffff:10.0.0.0/104"}, "flag -cluster-cidr: ::ffff:10.0.0.0/104 is an IPv4-mapped IPv6 CIDR"},
		{[]string{"--lb-ip-pool", "192.0.2.0/24", "--lb-ip-pool", "192.0.2.128/25"}, "flag -lb-ip-pool: 192.0.2.128/25 overlaps 192.0.2.0/24"},
		{[]string{"--lb-ip-pool", "172.30.0.225/28"}, "flag -lb-ip-pool: 172.30.0.225/28 has host bits set (did you mean 172.30.0.224/28?)"},
	} {
		if _, _, err := parseFlags(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

func TestNodePortFlag(t *testing.T) {
	p := netip.MustParsePrefix
	parse := func(args ...string) (proxy.NodePortAddresses, error) {
		var n proxy.NodePortAddresses
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Var(&proxycmd.NodePortFlag{Dst: &n}, "nodeport-addresses", "")
		return n, fs.Parse(args)
	}
	n, err := parse("--nodeport-addresses", "10.0.0.0/8, Primary", "--nodeport-addresses", "10.1.2.3/16,fd00::/64")
	if err != nil || !n.Primary || !slices.Equal(n.CIDRs, []netip.Prefix{p("10.0.0.0/8"), p("10.1.0.0/16"), p("fd00::/64")}) {
		t.Errorf("got %+v, %v", n, err)
	}
	if _, err := parse("--nodeport-addresses", "bogus"); err == nil || !strings.Contains(err.Error(), `flag -nodeport-addresses: "bogus" is not a CIDR`) || !strings.Contains(err.Error(), `"primary"`) {
		t.Errorf("bogus nodeport address: %v", err)
	}
}

// TestControllerOptionsValidatedBeforeStart: a controller's bad option
// fails build — before leader election — with the controller's own error,
// and every bad option is reported at once.
func TestControllerOptionsValidatedBeforeStart(t *testing.T) {
	var f cmFlags
	fs := flag.NewFlagSet("controller-manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	err := fs.Parse([]string{"--cluster-cidr", "10.244.0.0/16", "--node-cidr-mask-size-ipv4", "8",
		"--max-endpoints-per-slice", "5000", "--scheduler-name", "Not A Name"})
	if err != nil {
		t.Fatal(err)
	}
	on, err := f.enabled()
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = f.build(on)
	for _, want := range []string{"--node-cidr-mask-size-ipv4", "--max-endpoints-per-slice", "--scheduler-name"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("build error %v, want one naming %s", err, want)
		}
	}
	// Switched off, a controller's options are not its concern.
	f.controllers = cli.StringList{"*", "-nodeipam", "-endpointslice", "-scheduler"}
	if on, err = f.enabled(); err != nil {
		t.Fatal(err)
	}
	if _, cleanup, err := f.build(on); err != nil {
		t.Errorf("build with the misconfigured controllers off: %v", err)
	} else {
		cleanup()
	}
}

func TestLBPoolMustNotOverlapClusterCIDRWithBothRouteControllers(t *testing.T) {
	var f cmFlags
	fs := flag.NewFlagSet("controller-manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	if err := fs.Parse([]string{"--cluster-cidr", "10.244.0.0/16", "--lb-ip-pool", "10.244.255.0/24",
		"--configure-cloud-routes", "--configure-lb-routes"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.enabled(); err == nil || !strings.Contains(err.Error(), "--lb-ip-pool 10.244.255.0/24 overlaps --cluster-cidr 10.244.0.0/16") {
		t.Errorf("enabled: %v", err)
	}
}

func TestRegexpListFlag(t *testing.T) {
	var res []*regexp.Regexp
	fs := flag.NewFlagSet("flanneld", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&regexpList{&res}, "iface-regex", "")
	if err := fs.Parse([]string{"--iface-regex", `^ens, ^192\.168\.`, "--iface-regex", "^eth"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, re := range res {
		got = append(got, re.String())
	}
	if want := []string{"^ens", `^192\.168\.`, "^eth"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := fs.Parse([]string{"--iface-regex", "("}); err == nil || !strings.Contains(err.Error(), "flag -iface-regex: error parsing regexp") {
		t.Errorf("bad regex: %v", err)
	}
}
