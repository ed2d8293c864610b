package proxytest

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
)

// Damage removes some of a data plane's state by hand, as an admin or a
// firewall reload would (e.g. `iptables -t nat -F NODENET-SERVICES` in
// node).
type Damage struct {
	Name string
	Do   func(t testing.TB, node *nettest.NS)
}

// repairBound is how long RepairSuite lets a ClusterIP stay broken after
// a damage: generous on a loaded machine (the event-driven check repairs
// in well under a second; the periodic check, disabled here, would take
// its whole period).
const repairBound = 3 * time.Second

// RepairSuite checks the event-driven integrity check of a data plane that
// implements proxy.ChangeWatcher, with the periodic check disabled so
// only the kernel's announcements can trigger a repair: after each damage
// (in turn, in one proxy's life) a ClusterIP answers again within
// repairBound, through a repair the core counted; then the proxy's own
// syncs during endpoint churn, which remove rules and elements too, force
// no repair and no full sync.
func RepairSuite(t *testing.T, newDP NewDataPlane, damages ...Damage) {
	e := NewEnv(t, newDP)
	e.Config = func(c *proxy.Config) { c.IntegrityCheckPeriod = -1 }
	p := e.StartProxy(t)
	svc := e.CreateService(t, Service("repair", v1.ProtocolTCP, TCPPort))
	e.SetEndpoints(t, svc, TCPPort, Pod1)
	addr := vip(svc)
	Eventually(t, 10*time.Second, "service answers", func() error {
		_, err := DialTCP(e.Client, addr, time.Second)
		return err
	})
	for _, d := range damages {
		repairs := counterValue(t, p, "nodenet_proxy_state_repairs_total")
		d.Do(t, e.Node)
		start := time.Now()
		if _, err := DialTCP(e.Client, addr, 200*time.Millisecond); err == nil {
			t.Fatalf("%s: the ClusterIP still answers right after the damage: it did not damage anything", d.Name)
		}
		Eventually(t, repairBound, d.Name+": service answers again", func() error {
			_, err := DialTCP(e.Client, addr, 200*time.Millisecond)
			return err
		})
		took := time.Since(start)
		if n := counterValue(t, p, "nodenet_proxy_state_repairs_total") - repairs; n < 1 {
			t.Errorf("%s: answers again after %v but no repair was counted", d.Name, took)
		}
		t.Logf("%s: ClusterIP answers again %v after the damage", d.Name, took.Round(time.Millisecond))
	}

	// The proxy's own syncs: each announces removals, none may repair.
	time.Sleep(time.Second) // the last repair's own announcements settle
	repairs := counterValue(t, p, "nodenet_proxy_state_repairs_total")
	full := counterValue(t, p, "kubeproxy_sync_full_proxy_rules_duration_seconds")
	syncs := counterValue(t, p, "kubeproxy_sync_proxy_rules_duration_seconds")
	checks := counterValue(t, p, "nodenet_proxy_integrity_checks_total")
	for i := range 12 {
		if i%2 == 0 {
			e.SetEndpoints(t, svc, TCPPort, Pod1, Pod2)
		} else {
			e.SetEndpoints(t, svc, TCPPort, Pod1)
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(time.Second)
	syncs = counterValue(t, p, "kubeproxy_sync_proxy_rules_duration_seconds") - syncs
	checks = counterValue(t, p, "nodenet_proxy_integrity_checks_total") - checks
	t.Logf("endpoint churn: %v syncs, %v event-triggered integrity checks (over all families)", syncs, checks)
	if syncs < 1 {
		t.Fatal("endpoint churn caused no sync")
	}
	if n := counterValue(t, p, "nodenet_proxy_state_repairs_total") - repairs; n != 0 {
		t.Errorf("the proxy's own syncs forced %v repairs", n)
	}
	if n := counterValue(t, p, "kubeproxy_sync_full_proxy_rules_duration_seconds") - full; n != 0 {
		t.Errorf("endpoint churn caused %v full syncs; want none (partial syncs only)", n)
	}
}
