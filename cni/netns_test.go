package cni

import (
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

// TestPreparePod: the prepared socket lives in the pod's namespace, the
// thread is back in its own, and the plugin uses the preparation once, for
// its namespace only.
func TestPreparePod(t *testing.T) {
	pod := nettest.New(t)
	pod.MustExec(t, "ip", "link", "add", "prep0", "type", "bridge")
	runtime.LockOSThread() // what package initialization guarantees the binary
	defer runtime.UnlockOSThread()
	before := threadNetNS(t)
	pp, err := PreparePod(pod.Path())
	if err != nil || pp == nil || pp.ns.rtnl == nil {
		t.Fatalf("PreparePod: %+v %v", pp, err)
	}
	if threadNetNS(t) != before {
		t.Fatal("thread left in the pod's namespace")
	}
	p := &Plugin{Prepared: pp}
	if other, err := p.openPod("/proc/self/ns/net"); err != nil || other.rtnl != nil {
		t.Fatalf("another namespace got the preparation: %v", err)
	} else {
		other.Close()
	}
	podNS, err := p.openPod(pod.Path())
	if err != nil || podNS.rtnl == nil {
		t.Fatalf("openPod: %v", err)
	}
	defer podNS.Close()
	s, err := rtnlSocket(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := linkIndex(s, "prep0"); err != nil {
		t.Fatalf("prepared socket is not in the pod's namespace: %v", err)
	}
	if again, err := p.openPod(pod.Path()); err != nil || again.rtnl != nil {
		t.Fatalf("preparation used twice: %v", err)
	} else {
		again.Close()
	}
	for _, path := range []string{"", "/nonexistent/netns"} {
		if pp, err := PreparePod(path); pp != nil || err != nil {
			t.Errorf("PreparePod(%q) = %v, %v", path, pp, err)
		}
	}
}
