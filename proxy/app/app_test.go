package app

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/proxy"
)

func recordingModes(calls *[]string) Modes {
	mode := func(name string) Mode {
		return Mode{
			New: func(context.Context, proxy.Family) (proxy.DataPlane, error) {
				return nil, errors.New("not used")
			},
			Cleanup: func(_ context.Context, f proxy.Family) error {
				*calls = append(*calls, name+"/"+f.String())
				return nil
			},
		}
	}
	return Modes{"iptables": mode("iptables"), "nftables": mode("nftables")}
}

func TestCheck(t *testing.T) {
	var calls []string
	m := recordingModes(&calls)
	if err := m.Check("iptables"); err != nil {
		t.Error(err)
	}
	for _, mode := range []string{"ipvs", "ebpf"} {
		if err := m.Check(mode); !errors.Is(err, ErrNotImplemented) {
			t.Errorf("%s: %v, want ErrNotImplemented", mode, err)
		}
	}
	if err := m.Check("userspace"); err == nil || errors.Is(err, ErrNotImplemented) {
		t.Errorf("unknown mode: %v", err)
	}
}

func TestCleanupAllSkipsTheRunningMode(t *testing.T) {
	var calls []string
	m := recordingModes(&calls)
	log := slog.New(slog.DiscardHandler)
	if err := m.CleanupAll(context.Background(), "iptables", []proxy.Family{proxy.IPv4, proxy.IPv6}, log); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []string{"nftables/IPv4", "nftables/IPv6"}) {
		t.Errorf("cleanup calls %v", calls)
	}
	calls = nil
	if err := m.CleanupAll(context.Background(), "", []proxy.Family{proxy.IPv4}, log); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []string{"iptables/IPv4", "nftables/IPv4"}) {
		t.Errorf("--cleanup calls %v", calls)
	}
}

func TestRunRejectsUnbuiltMode(t *testing.T) {
	var calls []string
	err := Run(context.Background(), Options{Mode: "ipvs"}, recordingModes(&calls), nil)
	if !errors.Is(err, ErrNotImplemented) || len(calls) != 0 {
		t.Errorf("Run(ipvs) = %v, cleanup calls %v", err, calls)
	}
}

func TestOptionsValidate(t *testing.T) {
	p := netip.MustParsePrefix
	ok := Options{Mode: "iptables", Families: []proxy.Family{proxy.IPv4, proxy.IPv6}}
	ok.Core.ClusterCIDRs = []netip.Prefix{p("10.244.0.0/16"), p("fd00:10:244::/56")}
	ok.Core.NodePortAddresses.CIDRs = []netip.Prefix{p("10.0.0.0/8"), p("10.1.0.0/16")}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"two IPv4 cluster CIDRs", func(o *Options) { o.Core.ClusterCIDRs = []netip.Prefix{p("10.244.0.0/16"), p("10.245.0.0/16")} }, "--cluster-cidr: 10.244.0.0/16 and 10.245.0.0/16 are of the same IP family"},
		{"cluster CIDR host bits", func(o *Options) { o.Core.ClusterCIDRs = []netip.Prefix{p("10.244.1.0/16")} }, "--cluster-cidr: 10.244.1.0/16 has host bits set"},
		{"nodeport CIDR IPv4-mapped", func(o *Options) { o.Core.NodePortAddresses.CIDRs = []netip.Prefix{p("::ffff:10.0.0.0/104")} }, "--nodeport-addresses: ::ffff:10.0.0.0/104 is an IPv4-mapped"},
		{"family twice", func(o *Options) { o.Families = []proxy.Family{proxy.IPv4, proxy.IPv4} }, "each once"},
		{"unknown family", func(o *Options) { o.Families = []proxy.Family{5} }, "want IPv4 and/or IPv6"},
		{"negative sync period", func(o *Options) { o.Core.SyncPeriod = -time.Second }, "--sync-period -1s"},
		{"negative min sync period", func(o *Options) { o.Core.MinSyncPeriod = -time.Second }, "--min-sync-period -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			var calls []string
			if rerr := Run(context.Background(), o, recordingModes(&calls), nil); rerr == nil || rerr.Error() != err.Error() || len(calls) > 0 {
				t.Errorf("Run = %v after cleanups %v; want Validate's error before touching anything", rerr, calls)
			}
		})
	}
}
