package cloudroutes

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/routes"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

// TestControllerReportsFailures uses the fake table (trusted because it
// passes the same contract as the kernel) to provoke what a healthy VPC
// namespace will not: a destination taken by someone else's route.
func TestControllerReportsFailures(t *testing.T) {
	s := testapi.Start(t)
	fake, err := routes.NewFake(0, routes.ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	blocker := routes.Route{Dst: pfx("10.244.1.0/24"), Gw: ip("192.168.50.254")}
	if err := fake.AddForeign(blocker); err != nil {
		t.Fatal(err)
	}
	// A node a CNI daemon already declared available keeps its reason.
	flannel := testNode("c", []string{"10.244.3.0/24"}, "192.168.50.13")
	flannel.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "FlannelIsUp",
	}}
	createNode(t, s.Client, flannel)
	createNode(t, s.Client, testNode("a", []string{"10.244.1.0/24"}, "192.168.50.11"))
	createNode(t, s.Client, testNode("b", []string{"10.244.2.0/24"}, "192.168.50.12"))

	rec := record.NewFakeRecorder(100)
	startController(t, s.Client, Options{Table: fake, ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16"), ReconcilePeriod: time.Hour}, rec)

	select {
	case ev := <-rec.Events:
		if !strings.HasPrefix(ev, "Warning FailedToCreateRoute") || !strings.Contains(ev, "10.244.1.0/24") {
			t.Errorf("event %q", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for the route that could not be created")
	}
	expectRouteCreated(t, s.Client, "b")
	want := strings.Join([]string{
		"10.244.1.0/24 via 192.168.50.254 proto 4 table 254",
		"10.244.2.0/24 via 192.168.50.12 proto 78 table 254",
		"10.244.3.0/24 via 192.168.50.13 proto 78 table 254",
	}, "\n")
	testapi.Eventually(t, 5*time.Second, "table\n"+want, func() bool { return fake.Dump() == want })
	if c := networkCondition(t, s.Client, "a"); c != nil {
		t.Errorf("node a has no route but got %+v", c)
	}
	if c := networkCondition(t, s.Client, "c"); c == nil || c.Reason != "FlannelIsUp" {
		t.Errorf("node c condition overwritten: %+v", c)
	}
}
