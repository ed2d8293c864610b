package cni

import (
	"runtime"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

// TestOpenPodUsesPreparation: the plugin takes the prepared namespace (and
// its socket) once, and only for the namespace it was prepared for.
func TestOpenPodUsesPreparation(t *testing.T) {
	pod := nettest.New(t)
	runtime.LockOSThread() // what package initialization guarantees the binary
	defer runtime.UnlockOSThread()
	pp, err := PreparePod(pod.Path())
	if err != nil || pp == nil || !pp.ns.Prepared() {
		t.Fatalf("PreparePod: %+v %v", pp, err)
	}
	p := &Plugin{Prepared: pp}
	if other, err := p.openPod("/proc/self/ns/net"); err != nil || other.Prepared() {
		t.Fatalf("another namespace got the preparation: %v", err)
	} else {
		other.Close()
	}
	podNS, err := p.openPod(pod.Path())
	if err != nil || !podNS.Prepared() {
		t.Fatalf("openPod: %v", err)
	}
	podNS.Close()
	if again, err := p.openPod(pod.Path()); err != nil || again.Prepared() {
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
