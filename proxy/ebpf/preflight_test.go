package ebpf

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/cgroup2"
	"github.com/nodenet/nodenet/internal/nettest"
)

// TestPreflightNamesWhatIsMissing: a pin root off bpffs (existing or not)
// and a directory that is no cgroup are one error naming both.
func TestPreflightNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	for _, pins := range []string{dir, filepath.Join(dir, "missing", "nodenet")} {
		err := Preflight(pins, dir, true)
		if err == nil || !strings.Contains(err.Error(), "not on a bpf filesystem") || !strings.Contains(err.Error(), "not a cgroup v2 directory") {
			t.Errorf("Preflight(%s, %s) = %v", pins, dir, err)
		}
	}
}

// TestPreflightCgroupBindMount: the local cluster hands each node's proxy
// a bind mount of its node cgroup, whose mount root is a child cgroup; it
// must pass as a child, while the hierarchy's real root is still refused
// without RootCgroupOK.
func TestPreflightCgroupBindMount(t *testing.T) {
	nettest.RequirePrivileged(t)
	child := nettest.EmptyCgroup(t)
	bound := t.TempDir()
	if err := unix.Mount(child, bound, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", child, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(bound, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", bound, err)
		}
	})
	if err := checkCgroup(bound, false); err != nil {
		t.Errorf("bind mount of child cgroup %s: %v", child, err)
	}
	root, err := cgroup2.Mount()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkCgroup(root, false); err == nil || !strings.Contains(err.Error(), "not a child cgroup") {
		t.Errorf("root cgroup %s: err = %v, want a refusal", root, err)
	}
	if err := checkCgroup(root, true); err != nil {
		t.Errorf("root cgroup %s with rootOK: %v", root, err)
	}
}
