//go:build linux

package nettest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// cgroup2Roots are where a cgroup v2 hierarchy is mounted: beside v1
// controllers (hybrid layout) or alone.
var cgroup2Roots = []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}

// Cgroup creates a throwaway cgroup v2 child ("nnt-<random>") and moves
// the whole test process into it, so every socket the test opens, in any
// network namespace, belongs to it: eBPF socket programs attached there
// see the test's traffic and no one else's. Cleanup moves the process
// back to its own cgroup and removes the child, even when the test fails.
func Cgroup(t testing.TB) string {
	t.Helper()
	root := cgroup2Root(t)
	if root == "" {
		return ""
	}
	orig, err := ownCgroup(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "nnt-"+randomHex())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(orig, "cgroup.procs"), pid, 0); err != nil {
			t.Errorf("move back to cgroup %s: %v", orig, err)
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0); err != nil {
		t.Fatalf("move into cgroup %s: %v", dir, err)
	}
	return dir
}

// EmptyCgroup creates a throwaway cgroup v2 child ("nnt-<random>") that
// holds no process, removed at cleanup: eBPF socket programs attached there
// translate none of the test's sockets, so the test's traffic reaches a
// node namespace as packets, as another host's would.
func EmptyCgroup(t testing.TB) string {
	t.Helper()
	root := cgroup2Root(t)
	if root == "" {
		return ""
	}
	dir := filepath.Join(root, "nnt-"+randomHex())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	return dir
}

// cgroup2Root is where the cgroup v2 hierarchy is mounted; "" (after
// gating the test) when there is none.
func cgroup2Root(t testing.TB) string {
	for _, dir := range cgroup2Roots {
		var fs unix.Statfs_t
		if unix.Statfs(dir, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir
		}
	}
	gate(t, errors.New("no cgroup v2 hierarchy mounted"), strict())
	return ""
}

// ownCgroup is this process's directory in the cgroup v2 hierarchy at root.
func ownCgroup(root string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return filepath.Join(root, p), nil
		}
	}
	return "", errors.New("no cgroup v2 line in /proc/self/cgroup")
}

// BPFFS mounts a private bpf filesystem on a temporary directory for the
// test's pins (the machine's /sys/fs/bpf may be missing or shared) and
// unmounts and removes it at cleanup.
func BPFFS(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nnt-bpffs-")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		os.Remove(dir)
		t.Fatalf("mount bpffs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount bpffs: %v", err)
		}
		os.Remove(dir)
	})
	return dir
}

func randomHex() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
