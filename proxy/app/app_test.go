package app

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

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
