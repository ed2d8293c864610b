package flanneld

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

func mustConfig(t testing.TB, s string) *Config {
	t.Helper()
	c, err := ParseConfig([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newLM(client kubernetes.Interface, holder string, cfg *Config, o LeaseOptions) *leaseManager {
	return newLeaseManager(client, holder, cfg, o, func() {}, testapi.Logger())
}

var hostAttrs = LocalAttrs{PublicIP: netip.MustParseAddr("192.168.50.1"), BackendType: BackendHostGW}

// TestLeaseRace: 50 subnet managers race for 63 subnets; each gets one and
// no two get the same — the API server's create is the claim.
func TestLeaseRace(t *testing.T) {
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	cfg := mustConfig(t, `{"Network":"10.250.0.0/20","SubnetLen":26,"Backend":{"Type":"host-gw"}}`)
	const n = 50
	got := make([]netip.Prefix, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newLM(s.Client, fmt.Sprintf("node-%02d", i), cfg, LeaseOptions{Namespace: "kube-flannel", TTL: time.Hour})
			<-start
			l, err := m.Acquire(ctx, hostAttrs, func(string) {})
			got[i], errs[i] = l.Subnet, err
		}()
	}
	close(start)
	wg.Wait()
	seen := map[netip.Prefix]int{}
	for i, p := range got {
		if errs[i] != nil {
			t.Fatalf("node-%02d: %v", i, errs[i])
		}
		if !cfg.Network.Contains(p.Addr()) || p.Bits() != 26 || p.Addr() == cfg.Network.Addr() {
			t.Fatalf("node-%02d got %s, not a usable /26 of %s", i, p, cfg.Network)
		}
		if j, dup := seen[p]; dup {
			t.Fatalf("node-%02d and node-%02d both hold %s", j, i, p)
		}
		seen[p] = i
	}
	leases, err := s.Client.CoordinationV1().Leases("kube-flannel").List(ctx, metav1.ListOptions{})
	if err != nil || len(leases.Items) != n {
		t.Fatalf("%d leases stored (err %v), want %d", len(leases.Items), err, n)
	}
	// Every manager sees the other 49 as peers once its informer syncs.
	m := newLM(s.Client, "node-00", cfg, LeaseOptions{Namespace: "kube-flannel", TTL: time.Hour})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if peers := m.Peers(); len(peers) != n-1 || peers[0].PublicIP != hostAttrs.PublicIP {
		t.Fatalf("%d peers, want %d: %+v", len(peers), n-1, peers[:min(2, len(peers))])
	}
}

// TestLeaseExpiredIsReclaimed: a network with room for one subnet; A holds
// it and stops renewing; B waits and takes it over once A's TTL has run
// out, and A then learns it lost the lease.
func TestLeaseExpiredIsReclaimed(t *testing.T) {
	nettest.SkipShort(t, "waits for a lease to expire")
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	cfg := mustConfig(t, `{"Network":"10.251.0.0/16","SubnetMin":"10.251.9.0","SubnetMax":"10.251.9.0","Backend":{"Type":"host-gw"}}`)
	const ttl = 2 * time.Second
	a := newLM(s.Client, "node-a", cfg, LeaseOptions{Namespace: "kube-flannel", TTL: ttl, RenewMargin: ttl / 2})
	la, err := a.Acquire(ctx, hostAttrs, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	claimed := time.Now()
	b := newLM(s.Client, "node-b", cfg, LeaseOptions{Namespace: "kube-flannel", TTL: ttl})
	waited := ""
	lb, err := b.Acquire(ctx, hostAttrs, func(why string) { waited = why })
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(claimed)
	if lb.Subnet != la.Subnet || lb.Subnet.String() != "10.251.9.0/24" {
		t.Fatalf("b got %s, a had %s", lb.Subnet, la.Subnet)
	}
	if took < ttl-100*time.Millisecond || took > ttl+3*time.Second {
		t.Fatalf("reclaimed after %v; TTL is %v", took, ttl)
	}
	if waited == "" {
		t.Fatal("b never said it was waiting")
	}
	l, err := s.Client.CoordinationV1().Leases("kube-flannel").Get(ctx, "10.251.9.0-24", metav1.GetOptions{})
	if err != nil || holderOf(l) != "node-b" || l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions != 1 {
		t.Fatalf("lease after takeover: %+v %v", l, err)
	}
	kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.Keep(kctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a.Keep: %v, want ErrLeaseLost", err)
	}
}

// TestLeaseRenewAndReuse: a renewing holder keeps its subnet past the TTL;
// a restarted one (same holder, or only subnet.env's memory of it) gets
// the same subnet back.
func TestLeaseRenewAndReuse(t *testing.T) {
	nettest.SkipShort(t, "waits for lease renewals")
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	cfg := mustConfig(t, `{"Network":"10.252.0.0/16","Backend":{"Type":"host-gw"}}`)
	const ttl = 2 * time.Second
	a := newLM(s.Client, "node-a", cfg, LeaseOptions{Namespace: "kube-flannel", TTL: ttl, RenewMargin: 1500 * time.Millisecond})
	la, err := a.Acquire(ctx, hostAttrs, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Keep(kctx) }()
	time.Sleep(2 * ttl)
	// Another node must not be able to take a renewed lease.
	other := newLM(s.Client, "node-x", cfg, LeaseOptions{Namespace: "kube-flannel", TTL: ttl, Previous: []netip.Prefix{la.Subnet}})
	lx, err := other.Acquire(ctx, hostAttrs, func(string) {})
	if err != nil || lx.Subnet == la.Subnet {
		t.Fatalf("node-x got %s (err %v) while node-a renews %s", lx.Subnet, err, la.Subnet)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Same holder after a restart.
	a2 := newLM(s.Client, "node-a", cfg, LeaseOptions{Namespace: "kube-flannel", TTL: ttl})
	if l, err := a2.Acquire(ctx, hostAttrs, func(string) {}); err != nil || l.Subnet != la.Subnet {
		t.Fatalf("restart got %s (err %v), want %s", l.Subnet, err, la.Subnet)
	}
	// A new identity that remembers the subnet from subnet.env, after the
	// old lease expired.
	time.Sleep(ttl + 200*time.Millisecond)
	c := newLM(s.Client, "node-c", cfg, LeaseOptions{Namespace: "kube-flannel", TTL: ttl, Previous: []netip.Prefix{la.Subnet}})
	if l, err := c.Acquire(ctx, hostAttrs, func(string) {}); err != nil || l.Subnet != la.Subnet {
		t.Fatalf("subnet.env reuse got %s (err %v), want %s", l.Subnet, err, la.Subnet)
	}
}
