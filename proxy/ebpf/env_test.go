package ebpf

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nettest"
)

// cgroupRoot is the machine's cgroup v2 hierarchy (hybrid layout; a pure v2
// host mounts it at /sys/fs/cgroup).
func cgroupRoot(t testing.TB) string {
	t.Helper()
	for _, dir := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var fs unix.Statfs_t
		if unix.Statfs(dir, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir
		}
	}
	nettest.RequireSysfs(t, "/sys/fs/cgroup/unified/cgroup.procs")
	return ""
}

// testCgroup creates a throwaway cgroup and moves this test process into
// it, so the sockets the test opens (in any namespace) are the ones the
// programs translate. Cleanup moves the process back and removes it.
func testCgroup(t testing.TB) string {
	t.Helper()
	root := cgroupRoot(t)
	orig := ownCgroup(t, root)
	dir := filepath.Join(root, "nnt-"+randomName())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(filepath.Join(orig, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			t.Errorf("move back to cgroup %s: %v", orig, err)
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		t.Fatalf("move into cgroup %s: %v", dir, err)
	}
	return dir
}

// ownCgroup is this process's cgroup v2 directory.
func ownCgroup(t testing.TB, root string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return filepath.Join(root, p)
		}
	}
	t.Fatal("no cgroup v2 line in /proc/self/cgroup")
	return ""
}

// testBPFFS mounts a private bpf filesystem for the test's pins (the
// machine's /sys/fs/bpf may be absent or shared) and unmounts it after.
func testBPFFS(t testing.TB) string {
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

func randomName() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
