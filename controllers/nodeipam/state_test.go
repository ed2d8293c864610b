package nodeipam

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/testapi"
)

// A delete seen only as a tombstone (the watch missed it; a relist found
// the Node gone) still releases the Node's CIDRs.
func TestTombstoneReleases(t *testing.T) {
	client := fake.NewClientset()
	c, err := New(client, informers.NewSharedInformerFactory(client, 0), v4, nil, testapi.Logger())
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	cidrs, err := c.allocateLocked("gone")
	if err != nil {
		t.Fatal(err)
	}
	c.byNode["gone"] = &assignment{cidrs: cidrs, uid: "u1"}
	c.mu.Unlock()

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone", UID: "u1"}}
	c.enqueue(cache.DeletedFinalStateUnknown{Key: "gone", Obj: node})
	key, _ := c.queue.Get()
	if key != "gone" {
		t.Fatalf("queued %q, want gone", key)
	}
	if err := c.sync(testapi.Context(t), key); err != nil {
		t.Fatal(err)
	}
	if n := c.sets[0].InUse(); n != 0 || len(c.owners) != 0 || len(c.byNode) != 0 {
		t.Fatalf("after the tombstone: %d in use, owners %v, byNode %v", n, c.owners, c.byNode)
	}
}

// Two Nodes created with the same CIDR (by hand): the older keeps it, the
// younger is reported, and when the older goes the CIDR stays taken.
func TestDuplicateCIDRPassesToClaimant(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	for _, name := range []string{"x", "y"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24"}}}
		if _, err := s.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startController(t, s, Options{ClusterCIDRs: cidrlist.MustParse("10.244.0.0/23")}, nil)
	testapi.Eventually(t, waitLong, "InvalidPodCIDR event on y", func() bool {
		return len(events(t, s.Client, "y")) > 0 && events(t, s.Client, "y")[0] == ReasonInvalidPodCIDR
	})
	if ev := events(t, s.Client, "x"); len(ev) != 0 {
		t.Errorf("events on the older node x: %v", ev)
	}
	deleteNodes(t, s.Client, "x")
	createNodes(t, s.Client, []string{"z"}, 1)
	if got := waitAssigned(t, s.Client, []string{"z"})["z"]; got[0] != "10.244.1.0/24" {
		t.Fatalf("z got %v; 10.244.0.0/24 is still y's", got)
	}
	createNodes(t, s.Client, []string{"w"}, 1)
	testapi.Eventually(t, waitLong, "CIDRNotAvailable event on w", func() bool {
		for _, r := range events(t, s.Client, "w") {
			if r == ReasonCIDRNotAvailable {
				return true
			}
		}
		return false
	})
	if got := assigned(t, s.Client)["w"]; got != nil {
		t.Fatalf("w got %v in a full cluster", got)
	}
}
