package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestFirstSyncSeesEveryService: the first sync after start holds every
// Service the API has, not the part of the initial list the handlers had
// been given when the informers' caches reported synced. A partial first
// sync drops the rest's rules until the next sync (and a mode switch
// removes the old mode's rules right after it).
func TestFirstSyncSeesEveryService(t *testing.T) {
	const n = 3000
	objs := make([]runtime.Object, 0, 2*n)
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs, service("a", name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)),
			slice("a", name, name+"-1", 8080, fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)))
	}
	client := fake.NewClientset(objs...)
	p, rp := newTestProxy(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, client) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rp.mu.Lock()
		synced := len(rp.snaps) > 0
		rp.mu.Unlock()
		if synced {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no sync within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rp.mu.Lock()
	first := rp.snaps[0]
	rp.mu.Unlock()
	if len(first.Services) != n {
		t.Fatalf("first sync had %d of %d services", len(first.Services), n)
	}
	ready := 0
	for _, s := range first.Services {
		if len(s.Selected.Cluster) == 1 {
			ready++
		}
	}
	if ready != n {
		t.Errorf("first sync had endpoints for %d of %d services", ready, n)
	}
}
