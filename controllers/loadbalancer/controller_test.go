package loadbalancer

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/testapi"
)

func TestAllocateFromPool(t *testing.T) {
	s := testapi.Start(t)
	startController(t, s.Client, "192.0.2.0/28")

	createLB(t, s.Client, "web")
	ips := waitIPs(t, s.Client, "web", 1)
	if ips[0] != "192.0.2.1" {
		t.Errorf("web got %s, want the first usable address 192.0.2.1", ips[0])
	}

	// Neither another implementation's Services nor non-LoadBalancer ones
	// are ours to touch.
	class := "example.com/other-lb"
	createLB(t, s.Client, "other", func(svc *corev1.Service) { svc.Spec.LoadBalancerClass = &class })
	createLB(t, s.Client, "internal", func(svc *corev1.Service) { svc.Spec.Type = corev1.ServiceTypeClusterIP })
	createLB(t, s.Client, "second")
	if ips := waitIPs(t, s.Client, "second", 1); ips[0] != "192.0.2.2" {
		t.Errorf("second got %s, want 192.0.2.2", ips[0])
	}
	for _, name := range []string{"other", "internal"} {
		if ips := ingressIPs(t, getSvc(t, s.Client, name)); len(ips) > 0 {
			t.Errorf("service %s got %v, want none", name, ips)
		}
	}
	assertUnique(t, s.Client)
}

func TestRequestedIP(t *testing.T) {
	s := testapi.Start(t)
	startController(t, s.Client, "192.0.2.0/28")

	createLB(t, s.Client, "pinned", requestIP("192.0.2.10"))
	if ips := waitIPs(t, s.Client, "pinned", 1); ips[0] != "192.0.2.10" {
		t.Fatalf("pinned got %s, want the requested 192.0.2.10", ips[0])
	}

	createLB(t, s.Client, "thief", requestIP("192.0.2.10"))
	waitEvent(t, s.Client, "thief", ReasonIPAlreadyAllocated)
	createLB(t, s.Client, "outside", requestIP("198.51.100.7"))
	waitEvent(t, s.Client, "outside", ReasonLoadBalancerIPNotAvailable)
	createLB(t, s.Client, "broadcast", requestIP("192.0.2.15"))
	waitEvent(t, s.Client, "broadcast", ReasonLoadBalancerIPNotAvailable)
	stillNoIPs(t, s.Client, "thief")
	for _, name := range []string{"outside", "broadcast"} {
		if ips := ingressIPs(t, getSvc(t, s.Client, name)); len(ips) > 0 {
			t.Errorf("service %s got %v, want none", name, ips)
		}
	}

	// Once the holder goes, the waiting requester gets its address.
	if err := s.Client.CoreV1().Services("default").Delete(testapi.Context(t), "pinned", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pinned: %v", err)
	}
	if ips := waitIPs(t, s.Client, "thief", 1); ips[0] != "192.0.2.10" {
		t.Errorf("thief got %s after release, want 192.0.2.10", ips[0])
	}
	assertUnique(t, s.Client)
}

func TestExhaustionAndRelease(t *testing.T) {
	s := testapi.Start(t)
	startController(t, s.Client, "192.0.2.0/30") // .1 and .2 only
	ctx := testapi.Context(t)

	createLB(t, s.Client, "a")
	a := waitIPs(t, s.Client, "a", 1)[0]
	createLB(t, s.Client, "b")
	b := waitIPs(t, s.Client, "b", 1)[0]
	if got := []string{a, b}; !slices.Equal(got, []string{"192.0.2.1", "192.0.2.2"}) {
		t.Fatalf("a, b got %v, want [192.0.2.1 192.0.2.2]", got)
	}
	createLB(t, s.Client, "c")
	waitEvent(t, s.Client, "c", ReasonNoIPAvailable)
	stillNoIPs(t, s.Client, "c")

	// Deleting a frees its address for c.
	if err := s.Client.CoreV1().Services("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete a: %v", err)
	}
	if got := waitIPs(t, s.Client, "c", 1)[0]; got != a {
		t.Errorf("c got %s, want a's released %s", got, a)
	}

	// b turning into a ClusterIP Service frees its address for d.
	createLB(t, s.Client, "d")
	waitEvent(t, s.Client, "d", ReasonNoIPAvailable)
	svc := getSvc(t, s.Client, "b")
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	svc.Spec.ExternalTrafficPolicy = ""
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = 0
	}
	svc.Spec.AllocateLoadBalancerNodePorts = nil
	if _, err := s.Client.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("change b to ClusterIP: %v", err)
	}
	if got := waitIPs(t, s.Client, "d", 1)[0]; got != b {
		t.Errorf("d got %s, want b's released %s", got, b)
	}
	if ips := ingressIPs(t, getSvc(t, s.Client, "b")); len(ips) > 0 {
		t.Errorf("b still publishes %v after leaving LoadBalancer", ips)
	}
	assertUnique(t, s.Client)
}

func TestRestartKeepsAssignments(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	stop := startController(t, s.Client, "192.0.2.0/28")

	names := []string{"s1", "s2", "s3", "s4", "s5"}
	before := map[string]string{}
	for _, n := range names {
		createLB(t, s.Client, n)
	}
	for _, n := range names {
		before[n] = waitIPs(t, s.Client, n, 1)[0]
	}
	stop()

	// While no controller runs: s2 goes away, a newcomer arrives, and a
	// younger Service publishes s1's address (as a second controller copy
	// might have written during a split brain). "twin" sorts after "s1", so
	// s1 wins even if both were created within the same second.
	if err := s.Client.CoreV1().Services("default").Delete(ctx, "s2", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete s2: %v", err)
	}
	createLB(t, s.Client, "newcomer")
	createLB(t, s.Client, "twin")
	twin := getSvc(t, s.Client, "twin")
	twin.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: before["s1"], IPMode: ptr(corev1.LoadBalancerIPModeVIP)}}
	if _, err := s.Client.CoreV1().Services("default").UpdateStatus(ctx, twin, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write twin status: %v", err)
	}
	rvs := map[string]string{}
	for _, n := range names {
		if n != "s2" {
			rvs[n] = getSvc(t, s.Client, n).ResourceVersion
		}
	}

	published := recordPublished(t, s.Client)
	startController(t, s.Client, "192.0.2.0/28")
	newcomer := waitIPs(t, s.Client, "newcomer", 1)[0]
	testapi.Eventually(t, timeout, "twin to be moved off s1's address", func() bool {
		ips := ingressIPs(t, getSvc(t, s.Client, "twin"))
		return len(ips) == 1 && ips[0] != before["s1"]
	})
	for n, rv := range rvs {
		svc := getSvc(t, s.Client, n)
		if ips := ingressIPs(t, svc); len(ips) != 1 || ips[0] != before[n] {
			t.Errorf("%s publishes %v after restart, want %s", n, ips, before[n])
		}
		if svc.ResourceVersion != rv {
			t.Errorf("%s was rewritten after restart (resourceVersion %s -> %s)", n, rv, svc.ResourceVersion)
		}
	}
	// The table is rebuilt before the first allocation, so the newcomer
	// never published, even for a moment, an address a survivor holds.
	for _, ip := range published()["newcomer"] {
		for n := range rvs {
			if ip == before[n] {
				t.Errorf("newcomer published %s, which %s held across the restart", ip, n)
			}
		}
	}
	if newcomer != before["s2"] {
		t.Logf("newcomer got %s (s2's freed address was %s)", newcomer, before["s2"])
	}
	assertUnique(t, s.Client)
}

func TestDualStackPools(t *testing.T) {
	s := testapi.Start(t, func(c *apiserver.Config) {
		c.ServiceClusterIPRanges = cidrlist.MustParse("10.96.0.0/16", "fd00:96::/112")
	})
	startController(t, s.Client, "192.0.2.0/29", "2001:db8:1::/120")

	createLB(t, s.Client, "dual", dualStack)
	ips := waitIPs(t, s.Client, "dual", 2)
	if !inPrefix(t, ips[0], "192.0.2.0/29") || !inPrefix(t, ips[1], "2001:db8:1::/120") {
		t.Errorf("dual got %v, want an IPv4 then an IPv6 pool address (spec.ipFamilies order)", ips)
	}
	if ips[1] != "2001:db8:1::1" {
		t.Errorf("dual IPv6 = %s, want 2001:db8:1::1 (the subnet-router anycast ::0 is skipped)", ips[1])
	}

	createLB(t, s.Client, "v6", ipv6Only)
	if ips := waitIPs(t, s.Client, "v6", 1); !inPrefix(t, ips[0], "2001:db8:1::/120") {
		t.Errorf("v6 got %v, want an IPv6 pool address", ips)
	}
	createLB(t, s.Client, "v4")
	if ips := waitIPs(t, s.Client, "v4", 1); !inPrefix(t, ips[0], "192.0.2.0/29") {
		t.Errorf("v4 got %v, want an IPv4 pool address", ips)
	}
	createLB(t, s.Client, "pinned6", ipv6Only, requestIP("2001:db8:1::42"))
	if ips := waitIPs(t, s.Client, "pinned6", 1); ips[0] != "2001:db8:1::42" {
		t.Errorf("pinned6 got %v, want the requested 2001:db8:1::42", ips)
	}
	assertUnique(t, s.Client)
}

func TestNoPoolForFamily(t *testing.T) {
	s := testapi.Start(t, func(c *apiserver.Config) {
		c.ServiceClusterIPRanges = cidrlist.MustParse("10.96.0.0/16", "fd00:96::/112")
	})
	startController(t, s.Client, "192.0.2.0/29")
	createLB(t, s.Client, "v6", ipv6Only)
	waitEvent(t, s.Client, "v6", ReasonNoIPAvailable)
	// A dual-stack Service gets what the pools can give.
	createLB(t, s.Client, "dual", dualStack)
	if ips := waitIPs(t, s.Client, "dual", 1); !inPrefix(t, ips[0], "192.0.2.0/29") {
		t.Errorf("dual got %v, want only an IPv4 pool address", ips)
	}
}
