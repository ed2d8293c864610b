package nodeipam

import (
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/testapi"
)

var v4 = Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16")}

func TestConcurrentNodesGetDistinctCIDRs(t *testing.T) {
	s := testapi.Start(t)
	r := startController(t, s, v4, nil)
	all := names(0, 200)
	createNodes(t, s.Client, all, 16)
	got := waitAssigned(t, s.Client, all)
	checkDistinct(t, got, []string{"10.244.0.0/16"}, []int{24})
	// One write per Node: no retries, no whole-object updates.
	if n := r.patches.Load(); n != int64(len(all)) {
		t.Errorf("%d PATCH requests for %d nodes", n, len(all))
	}
}

func TestRestartMidwayKeepsCIDRsDistinct(t *testing.T) {
	s := testapi.Start(t)
	first := startController(t, s, v4, nil)
	all := names(0, 200)
	created := make(chan error, 1)
	ctx := testapi.Context(t)
	go func() { created <- tryCreateNodes(ctx, s.Client, all, 16) }()
	var before map[string][]string
	testapi.Eventually(t, waitLong, "half of the nodes assigned", func() bool {
		before = assigned(t, s.Client)
		return len(before) >= len(all)/2
	})
	first.stop(t)
	before = assigned(t, s.Client) // what the first instance really wrote
	t.Logf("first instance assigned %d nodes", len(before))

	startController(t, s, v4, nil) // new client, new informers, empty memory
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	got := waitAssigned(t, s.Client, all)
	checkDistinct(t, got, []string{"10.244.0.0/16"}, []int{24})
	for n, cidrs := range before {
		if !slices.Equal(got[n], cidrs) {
			t.Errorf("node %s: %v before the restart, %v after", n, cidrs, got[n])
		}
	}
}

// A write refused because the Node got CIDRs behind the cache's back (an
// earlier instance crashed after its PATCH) must adopt them and free the
// CIDR it had chosen, not leak it.
func TestRefusedWriteAdoptsAndFreesChoice(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	opts := Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/23")} // two subnets
	createNodes(t, s.Client, []string{"a"}, 1)
	var raced atomic.Bool
	r := startController(t, s, opts, func(req *http.Request) {
		if req.Method != http.MethodPatch || !strings.HasSuffix(req.URL.Path, "/nodes/a") || !raced.CompareAndSwap(false, true) {
			return
		}
		// The controller chose 10.244.0.0/24; another writer wins the race.
		patch := []byte(`{"spec":{"podCIDR":"10.244.1.0/24","podCIDRs":["10.244.1.0/24"]}}`)
		if _, err := s.Client.CoreV1().Nodes().Patch(ctx, "a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Errorf("racing patch: %v", err)
		}
	})
	got := waitAssigned(t, s.Client, []string{"a"})
	if !raced.Load() || got["a"][0] != "10.244.1.0/24" {
		t.Fatalf("node a: %v (raced %v), want the racing writer's 10.244.1.0/24", got["a"], raced.Load())
	}
	// The API shows the racing write before the controller has seen its
	// own patch refused; a node created in between could be handed the
	// racer's CIDR (nothing can prevent that: the racer bypassed the
	// controller). Wait for the adoption, which is what this test is about.
	testapi.Eventually(t, 10*time.Second, "controller adopts a's CIDR", func() bool {
		r.c.mu.Lock()
		defer r.c.mu.Unlock()
		return r.c.owners[netip.MustParsePrefix("10.244.1.0/24")] == "a"
	})
	createNodes(t, s.Client, []string{"b"}, 1)
	got = waitAssigned(t, s.Client, []string{"b"})
	if got["b"][0] != "10.244.0.0/24" {
		t.Fatalf("node b: %v, want the CIDR chosen for a and given up, 10.244.0.0/24", got["b"])
	}
}

func TestDeletedNodesCIDRsAreReused(t *testing.T) {
	s := testapi.Start(t)
	cluster := "10.244.0.0/22" // four /24s: every new node needs a freed one
	startController(t, s, Options{ClusterCIDRs: cidrlist.MustParse(cluster)}, nil)
	live := names(0, 4)
	createNodes(t, s.Client, live, 4)
	got := waitAssigned(t, s.Client, live)
	next := 4
	for round := range 3 {
		gone := []string{live[round], live[round+1]}
		freed := []string{got[gone[0]][0], got[gone[1]][0]}
		deleteNodes(t, s.Client, gone...)
		live = slices.DeleteFunc(live, func(n string) bool { return slices.Contains(gone, n) })
		fresh := names(next, next+2)
		next += 2
		createNodes(t, s.Client, fresh, 2)
		live = append(live, fresh...)
		got = waitAssigned(t, s.Client, live)
		checkDistinct(t, got, []string{cluster}, []int{24})
		reused := []string{got[fresh[0]][0], got[fresh[1]][0]}
		slices.Sort(reused)
		slices.Sort(freed)
		if !slices.Equal(reused, freed) {
			t.Fatalf("round %d: new nodes got %v, want the freed %v", round, reused, freed)
		}
	}
}

func TestDualStack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		clusters []string
		masks    []int
	}{
		{"IPv4 primary", []string{"10.244.0.0/16", "fd00:10:244::/56"}, []int{24, 64}},
		{"IPv6 primary", []string{"fd00:10:244::/56", "10.244.0.0/16"}, []int{64, 24}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testapi.Start(t)
			startController(t, s, Options{ClusterCIDRs: cidrlist.MustParse(tc.clusters...)}, nil)
			all := names(0, 20)
			createNodes(t, s.Client, all, 8)
			checkDistinct(t, waitAssigned(t, s.Client, all), tc.clusters, tc.masks)
		})
	}
}

func TestExhaustionWaitsForARelease(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	startController(t, s, Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/23")}, nil)
	createNodes(t, s.Client, []string{"a", "b"}, 2)
	got := waitAssigned(t, s.Client, []string{"a", "b"})
	createNodes(t, s.Client, []string{"c"}, 1)

	unavailable := func(status corev1.ConditionStatus, reason string) func() bool {
		return func() bool {
			n, err := s.Client.CoreV1().Nodes().Get(ctx, "c", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return hasUnavailable(n, status, reason)
		}
	}
	testapi.Eventually(t, waitLong, "NetworkUnavailable=True NoCIDRAvailable on c", unavailable(corev1.ConditionTrue, ConditionReasonNoCIDR))
	testapi.Eventually(t, waitLong, "CIDRNotAvailable event on c", func() bool {
		return slices.Contains(events(t, s.Client, "c"), ReasonCIDRNotAvailable)
	})
	if n := len(assigned(t, s.Client)); n != 2 {
		t.Fatalf("%d nodes hold CIDRs in a cluster of two", n)
	}

	deleteNodes(t, s.Client, "a")
	c := waitAssigned(t, s.Client, []string{"c"})["c"]
	if !slices.Equal(c, got["a"]) {
		t.Fatalf("c got %v, want a's freed %v", c, got["a"])
	}
	testapi.Eventually(t, waitLong, "NetworkUnavailable=False on c", unavailable(corev1.ConditionFalse, ConditionReasonCIDRAssigned))
}

func TestExistingNodesAreOccupiedFirst(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	existing := map[string]string{
		"old-0": "10.244.0.0/24", "old-1": "10.244.1.0/24", "old-3": "10.244.3.0/24",
		"outside": "10.99.0.0/24", // kept, reported, not counted
	}
	for name, cidr := range existing {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
		if _, err := s.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// 10.244.0.0/22 has four /24s; three are taken, so exactly one of the
	// new nodes fits, and it must get 10.244.2.0/24.
	startController(t, s, Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/22")}, nil)
	createNodes(t, s.Client, []string{"new-0", "new-1"}, 2)
	testapi.Eventually(t, waitLong, "one new node assigned, one reported", func() bool {
		got := assigned(t, s.Client)
		return len(got) == 5 && slices.Contains(events(t, s.Client, "outside"), ReasonInvalidPodCIDR) &&
			(slices.Contains(events(t, s.Client, "new-0"), ReasonCIDRNotAvailable) ||
				slices.Contains(events(t, s.Client, "new-1"), ReasonCIDRNotAvailable))
	})
	got := assigned(t, s.Client)
	for name, cidr := range existing {
		if got[name][0] != cidr {
			t.Errorf("node %s: %v, want its own %s", name, got[name], cidr)
		}
	}
	newCIDR := append(got["new-0"], got["new-1"]...)
	if !slices.Equal(newCIDR, []string{"10.244.2.0/24"}) {
		t.Errorf("new nodes got %v, want only the free 10.244.2.0/24", newCIDR)
	}
}

// TestOptionsValidate: Validate (which the controller manager calls before
// leader election) and New refuse the same options with the same error.
func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no CIDR", Options{}, "--cluster-cidr: required"},
		{"two IPv4", Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16,10.245.0.0/16")}, "same IP family"},
		{"overlapping", Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16,10.244.8.0/24")}, "same IP family"},
		{"three", Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16,fd00::/48,10.1.0.0/16")}, "at most two"},
		{"4in6", Options{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}}, "IPv4-mapped"},
		{"host bits", Options{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/16")}}, "did you mean 10.244.0.0/16"},
		{"v4 mask equal to prefix", Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/24")}, "--node-cidr-mask-size-ipv4"},
		{"v4 mask shorter", Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16"), NodeCIDRMaskSizeIPv4: 8}, "--node-cidr-mask-size-ipv4"},
		{"v4 mask too long", Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16"), NodeCIDRMaskSizeIPv4: 33}, "--node-cidr-mask-size-ipv4"},
		{"v6 mask shorter", Options{ClusterCIDRs: cidrlist.MustParse("fd00::/64")}, "--node-cidr-mask-size-ipv6"},
		{"v6 too many subnets", Options{ClusterCIDRs: cidrlist.MustParse("fd00::/32")}, "--node-cidr-mask-size-ipv6"},
		{"negative", Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16"), NodeCIDRMaskSizeIPv4: -1}, "negative"},
		{"single-stack flag with dual-stack", Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16,fd00::/48"), NodeCIDRMaskSize: 24}, "--node-cidr-mask-size: only for a single-stack"},
		{"single-stack flag too short", Options{ClusterCIDRs: cidrlist.MustParse("fd00::/48"), NodeCIDRMaskSize: 40}, "--node-cidr-mask-size:"},
		{"single-stack flag conflicts", Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16"), NodeCIDRMaskSize: 24, NodeCIDRMaskSizeIPv4: 26}, "conflicts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate error %v, want one containing %q", err, tc.want)
			}
			t.Log(err)
			factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
			if _, nerr := New(fake.NewClientset(), factory, tc.opts, nil, testapi.Logger()); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New error %v, want Validate's %v", nerr, err)
			}
		})
	}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	for _, ok := range []Options{
		{ClusterCIDRs: cidrlist.MustParse("fd00:10:244::/48")},
		{ClusterCIDRs: cidrlist.MustParse("fd00:10:244::/56"), NodeCIDRMaskSize: 64},
		{ClusterCIDRs: cidrlist.MustParse("10.0.0.0/8"), NodeCIDRMaskSize: 28, NodeCIDRMaskSizeIPv4: 28},
		{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/16,fd00::/48"), NodeCIDRMaskSizeIPv4: 26, NodeCIDRMaskSizeIPv6: 64},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", ok, err)
		}
		if _, err := New(fake.NewClientset(), factory, ok, nil, testapi.Logger()); err != nil {
			t.Errorf("New(%+v): %v", ok, err)
		}
	}
}
