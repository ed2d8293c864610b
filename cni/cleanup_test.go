package cni

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

// TestCleanup: after real ADDs with ipMasq, Cleanup leaves the bridge and
// the reservations while a pod is attached (ErrPodsAttached) but removes
// the rest; once the pod is gone it removes the bridge and the
// reservations too, and a second run has nothing to do. What is not the
// plugin's stays: another network's reservations, another bridge, a
// foreign iptables rule, another project's binary named like ours.
func TestCleanup(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "iptables-save")
	n := newNode(t, true)
	pod := nettest.New(t)
	a := args(pod, "c1", n.conf("1.1.0", `"ipMasq":true`))
	n.mustAdd(a)
	o := n.cleanupOptions(t)
	n.host.MustExec(t, "ip", "link", "add", "br-keep", "type", "bridge")
	n.host.MustExec(t, "iptables", "-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", "not nodenet", "-j", "RETURN")
	if err := os.MkdirAll(filepath.Join(n.dataDir, "other"), 0o755); err != nil {
		t.Fatal(err)
	}

	removed, err := n.cleanup(o)
	if !errors.Is(err, ErrPodsAttached) {
		t.Fatalf("Cleanup with a pod attached: %v, want ErrPodsAttached", err)
	}
	checkReported(t, removed, "chain nat "+masqChain("cbr0"), "plugin binary "+filepath.Join(o.BinDir, "nodenet"))
	if _, err := n.host.Handle().LinkByName("cni0"); err != nil {
		t.Errorf("bridge removed under a pod: %v", err)
	}
	if len(n.reservations("cbr0")) != 1 {
		t.Errorf("reservations removed under a pod")
	}
	if out := string(n.host.MustExec(t, "iptables-save", "-t", "nat")); strings.Contains(out, "NODENET-MASQ") {
		t.Errorf("ipMasq rules left:\n%s", out)
	}

	if err := n.del(a); err != nil {
		t.Fatal(err)
	}
	removed, err = n.cleanup(o)
	if err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	checkReported(t, removed, "bridge cni0", "address reservations "+filepath.Join(n.dataDir, "cbr0"))
	if got := links(t, n.host); strings.Join(got, ",") != "br-keep" {
		t.Errorf("host links after cleanup: %v, want only br-keep", got)
	}
	if _, err := os.Stat(filepath.Join(n.dataDir, "other")); err != nil {
		t.Errorf("another network's reservations: %v", err)
	}
	if _, err := os.Stat(filepath.Join(o.BinDir, "flannel")); err != nil {
		t.Errorf("a foreign plugin binary: %v", err)
	}
	if out := string(n.host.MustExec(t, "iptables-save", "-t", "nat")); !strings.Contains(out, `"not nodenet"`) {
		t.Errorf("foreign rule gone:\n%s", out)
	}
	if removed, err := n.cleanup(o); err != nil || len(removed) != 0 {
		t.Errorf("second Cleanup: %v, removed %q; want nothing to do", err, removed)
	}
}

// TestCleanupForce deletes the bridge and the pods' veths under running
// pods.
func TestCleanupForce(t *testing.T) {
	nettest.RequirePrivileged(t)
	n := newNode(t, true)
	pod := nettest.New(t)
	n.mustAdd(args(pod, "c1", n.conf("1.1.0", "")))
	o := n.cleanupOptions(t)
	o.Force = true
	removed, err := n.cleanup(o)
	if err != nil {
		t.Fatalf("Cleanup --force: %v", err)
	}
	checkReported(t, removed, "pod veth "+HostVethName("c1", "eth0"), "bridge cni0")
	if got := links(t, n.host); len(got) != 0 {
		t.Errorf("host links after a forced cleanup: %v", got)
	}
	if got := links(t, pod); len(got) != 0 {
		t.Errorf("pod links after a forced cleanup: %v", got)
	}
}

// cleanupOptions: a bin directory holding this test binary as "nodenet"
// (a Go binary of this module) and a shell script as "flannel".
func (n *node) cleanupOptions(t *testing.T) CleanupOptions {
	t.Helper()
	bin := filepath.Join(n.dir, "bin")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"nodenet": self, "flannel": []byte("#!/bin/sh\nexit 0\n")} {
		if err := os.WriteFile(filepath.Join(bin, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return CleanupOptions{Network: "cbr0", DataDir: n.dataDir, BinDir: bin, Plugins: []string{"nodenet", "flannel"}, Logger: slog.New(slog.DiscardHandler)}
}

func (n *node) cleanup(o CleanupOptions) (removed []string, err error) {
	err = n.host.Do(func() error {
		var cerr error
		removed, cerr = Cleanup(context.Background(), o)
		return cerr
	})
	return removed, err
}

func checkReported(t *testing.T, removed []string, want ...string) {
	t.Helper()
	all := strings.Join(removed, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("report lacks %q:\n%s", w, all)
		}
	}
}
