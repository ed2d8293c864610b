package proxytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
)

// Mode is one data plane as the switch test sees it.
type Mode struct {
	Name string
	New  NewDataPlane
	// Leftovers describes any kernel state of this mode left in node ("" if
	// none).
	Leftovers func(t testing.TB, node *nettest.NS) string
}

// SwitchSuite starts the proxy in the first mode, then switches through
// the others in order and back to the first, the way `nodenet proxy` does
// (the new mode cleans up every other mode first), checking after each
// switch that the old mode left nothing behind and that a ClusterIP keeps
// working. With two modes that is a → b → a. It runs IPv4 only: Leftovers
// looks at IPv4 state, so IPv6 data planes would go unchecked.
func SwitchSuite(t *testing.T, modes ...Mode) {
	nettest.SkipShort(t, "the real-kernel mode switch suite")
	if len(modes) < 2 {
		t.Fatalf("SwitchSuite needs two modes or more, got %d", len(modes))
	}
	e := NewEnv(t, modes[0].New)
	svc := e.CreateService(t, Service("switch", v1.ProtocolTCP, TCPPort))
	e.SetEndpoints(t, svc, TCPPort, Pod1, Pod2)
	works := func(mode string) {
		t.Helper()
		Eventually(t, wait, fmt.Sprintf("ClusterIP under %s", mode), func() error {
			_, err := DialTCP(e.Client, vip(svc), time.Second)
			return err
		})
	}
	start := func(m Mode) {
		e.StartProxyWith(t, map[proxy.Family]proxy.DataPlane{proxy.IPv4: m.New(t, e.Node, proxy.IPv4)})
	}
	start(modes[0])
	works(modes[0].Name)
	for i, from := range modes {
		to := modes[(i+1)%len(modes)]
		e.StopProxy()
		if err := from.New(t, e.Node, proxy.IPv4).Cleanup(context.Background()); err != nil {
			t.Fatalf("clean up %s: %v", from.Name, err)
		}
		if left := from.Leftovers(t, e.Node); left != "" {
			t.Fatalf("%s left state behind after cleanup:\n%s", from.Name, left)
		}
		start(to)
		works(to.Name)
		if left := from.Leftovers(t, e.Node); left != "" {
			t.Fatalf("%s state reappeared under %s:\n%s", from.Name, to.Name, left)
		}
	}
}
