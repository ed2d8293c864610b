package cloudroutes

import (
	"fmt"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/routes"
)

// TestControllerRepairsDeletedRoutes is the VPC router's life cycle in a
// real namespace against a real API server, once with the netlink watch
// and once with the periodic reconcile alone: routes appear with the
// nodes; a route deleted by hand comes back (the time it took is logged,
// and bounded by the reconcile period); a deleted node's route goes; a
// node that comes back with the same podCIDR gets its route again.
func TestControllerRepairsDeletedRoutes(t *testing.T) {
	nettest.RequirePrivileged(t)
	for _, tc := range []struct {
		name   string
		watch  bool
		period time.Duration
	}{
		// An hour: only the watch can repair in time.
		{"watch", true, time.Hour},
		{"reconcile", false, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testapi.Start(t)
			vpc, table := vpcTable(t)
			m := NewMetrics()
			opts := Options{Table: table, ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16"), ReconcilePeriod: tc.period, Metrics: m}
			if tc.watch {
				opts.Watcher = table
			}
			startController(t, s.Client, opts, nil)
			createNode(t, s.Client, testNode("a", []string{"10.244.1.0/24"}, "192.168.50.11"))
			createNode(t, s.Client, testNode("b", []string{"10.244.2.0/24"}, "192.168.50.12"))
			both := []string{"10.244.1.0/24 via 192.168.50.11", "10.244.2.0/24 via 192.168.50.12"}
			waitRoutes(t, vpc, 10*time.Second, "routes for a and b", both...)

			// The bound is the reconcile period (plus a sync); with the
			// watch the period is an hour, so any repair is the watch's.
			bound := min(tc.period, 5*time.Second) + 2*time.Second
			const rounds = 5
			var took []time.Duration
			for i := range rounds {
				// From before the command: an upper bound, which includes
				// running ip(8).
				start := time.Now()
				vpc.MustExec(t, "ip", "route", "del", "10.244.1.0/24", "proto", "78")
				for !slices.Contains(kernelRoutes(t, vpc, routes.ProtocolNodenet), both[0]) {
					if time.Since(start) > bound {
						t.Fatalf("round %d: route not repaired within %v", i, bound)
					}
					time.Sleep(time.Millisecond)
				}
				took = append(took, time.Since(start))
				if !tc.watch {
					// Spread the deletions over the ticker's phase.
					time.Sleep(time.Duration(i+1) * tc.period / (rounds + 1))
				}
			}
			slices.Sort(took)
			t.Logf("%s: route deleted by hand was back after min %v, median %v, max %v (%d rounds, reconcile period %v)",
				tc.name, took[0], took[len(took)/2], took[len(took)-1], rounds, tc.period)
			// The kernel shows a route before the sync that added it has
			// counted it: wait for the metrics.
			expectCount(t, m, opRepair, rounds)
			expectCount(t, m, opCreate, 2)
			if tc.watch {
				testapi.Eventually(t, 5*time.Second, "every repair's latency observed", func() bool {
					n, _ := repairObservations(t, m)
					return n == rounds
				})
				n, sum := repairObservations(t, m)
				t.Logf("%s: the controller's own figure (route_repair_seconds, kernel notice to route back): mean %v",
					tc.name, time.Duration(sum/float64(n)*float64(time.Second)))
			} else if n, _ := repairObservations(t, m); n != 0 {
				t.Errorf("repair latency observed %d times without a watch", n)
			}

			if err := s.Client.CoreV1().Nodes().Delete(t.Context(), "a", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitRoutes(t, vpc, 10*time.Second, "a's route to go with it", both[1])
			createNode(t, s.Client, testNode("a", []string{"10.244.1.0/24"}, "192.168.50.11"))
			waitRoutes(t, vpc, 10*time.Second, "a's route back with a", both...)
			expectCount(t, m, opDelete, 1)
			expectCount(t, m, opCreate, 3) // a, b, a again
			testapi.Eventually(t, 5*time.Second, "routes gauge 2", func() bool {
				var g dto.Metric
				return m.routes.Write(&g) == nil && g.GetGauge().GetValue() == 2
			})
		})
	}
}

// waitRoutes waits until the table holds exactly want among our routes.
func waitRoutes(t *testing.T, vpc *nettest.NS, timeout time.Duration, what string, want ...string) {
	t.Helper()
	testapi.Eventually(t, timeout, what, func() bool {
		return slices.Equal(kernelRoutes(t, vpc, routes.ProtocolNodenet), want)
	})
}

// expectCount waits until route_operations_total{op,result="success"} is
// want.
func expectCount(t *testing.T, m *Metrics, op string, want float64) {
	t.Helper()
	testapi.Eventually(t, 5*time.Second, fmt.Sprintf("%s count %v", op, want), func() bool {
		var d dto.Metric
		if err := m.operations.WithLabelValues(op, "success").Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetCounter().GetValue() == want
	})
}

// repairObservations returns route_repair_seconds' count and sum.
func repairObservations(t *testing.T, m *Metrics) (uint64, float64) {
	t.Helper()
	var d dto.Metric
	if err := m.repair.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
}
