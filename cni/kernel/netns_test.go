package kernel

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nettest"
)

func threadNetNS(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestPrepareNetNS: the prepared socket lives in the pod's namespace, the
// thread is back in its own, and Dial hands the socket out once.
func TestPrepareNetNS(t *testing.T) {
	pod := nettest.New(t)
	pod.MustExec(t, "ip", "link", "add", "prep0", "type", "bridge")
	runtime.LockOSThread() // what package initialization guarantees the binary
	defer runtime.UnlockOSThread()
	before := threadNetNS(t)
	ns, err := PrepareNetNS(pod.Path())
	if err != nil || ns == nil || !ns.Prepared() {
		t.Fatalf("PrepareNetNS: %+v %v", ns, err)
	}
	defer ns.Close()
	if threadNetNS(t) != before {
		t.Fatal("thread left in the pod's namespace")
	}
	s, err := ns.Dial()
	if err != nil || ns.Prepared() {
		t.Fatalf("Dial: %v, still prepared %v", err, ns.Prepared())
	}
	defer s.Close()
	if _, err := s.Link("prep0"); err != nil {
		t.Fatalf("prepared socket is not in the pod's namespace: %v", err)
	}
	again, err := ns.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := again.Link("prep0"); err != nil {
		t.Fatalf("a second socket is not in the pod's namespace: %v", err)
	}
	for _, path := range []string{"", "/nonexistent/netns"} {
		if ns, err := PrepareNetNS(path); ns != nil || err != nil {
			t.Errorf("PrepareNetNS(%q) = %v, %v", path, ns, err)
		}
	}
}

// TestOpenNetNS tells a missing namespace and a file that is none from a
// namespace.
func TestOpenNetNS(t *testing.T) {
	if _, err := OpenNetNS("/nonexistent/netns"); !errors.Is(err, ErrNoNetNS) {
		t.Errorf("missing: %v", err)
	}
	file := filepath.Join(t.TempDir(), "ns")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenNetNS(file); !errors.Is(err, ErrNotNetNS) {
		t.Errorf("ordinary file: %v", err)
	}
	ns, err := OpenNetNS("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("own namespace through /proc: %v", err)
	}
	ns.Close()
}
