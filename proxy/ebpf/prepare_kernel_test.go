package ebpf

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestPrepareLoadsBeforeTheFirstSync: Prepare (run by the core while the
// informers list) attaches every hook before any snapshot exists; a second
// Prepare changes nothing; the first Sync after it is a full one, so it
// reads back and replaces what an earlier process left in the pinned maps
// even when the core calls it partial; map metrics wait for that sync.
func TestPrepareLoadsBeforeTheFirstSync(t *testing.T) {
	nettest.RequirePrivileged(t)
	ctx := context.Background()
	cfg := Config{Family: proxy.IPv4, Cgroup: nettest.Cgroup(t), PinDir: filepath.Join(nettest.BPFFS(t), "ipv4"), Log: testapi.Logger()}
	t.Cleanup(func() {
		if err := New(cfg).Cleanup(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	// An earlier process programmed a service that is gone now.
	old := New(cfg)
	gone := proxytest.Port("a", "gone", "10.96.0.9", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.9"))
	if _, err := old.Sync(ctx, proxytest.Snapshot(proxy.IPv4, gone), proxy.ChangeSet{Full: true}); err != nil {
		t.Fatalf("earlier process's sync: %v", err)
	}
	old.Close()

	d := New(cfg)
	defer d.Close()
	if err := d.Prepare(ctx); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	before := pinnedLinks(t, d)
	// Before the first sync only the counters (entry points skipped by
	// reason, tc links attached and detached): the state knows nothing
	// of what the maps hold yet.
	if n := collected(d); n != 4 {
		t.Errorf("metrics before the first sync: %d series, want the 4 counters", n)
	}
	if err := d.Prepare(ctx); err != nil {
		t.Fatalf("second prepare: %v", err)
	}
	for _, h := range hooks[proxy.IPv4] {
		if _, err := os.Stat(d.linkPin(h.prog)); err != nil {
			t.Fatalf("after a second Prepare: %v", err)
		}
	}

	web := proxytest.Port("a", "web", "10.96.0.1", 80, proxy.TCP, proxytest.WithEndpoints(8080, "10.244.1.2", "10.244.2.2"))
	// Partial, naming only web: the data plane must make it full.
	if _, err := d.Sync(ctx, proxytest.Snapshot(proxy.IPv4, web), proxytest.Changed(web.Name)); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	if n := collected(d); n <= 4 {
		t.Errorf("metrics after the first sync: %d series, want map sizes too", n)
	}
	svcs, err := d.state.services.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 1 {
		t.Errorf("services map after the first sync holds %d entries, want web's only (the gone service's was left): %v", len(svcs), svcs)
	}
	for prog, info := range pinnedLinks(t, d) {
		if info.ID != before[prog].ID {
			t.Errorf("%s: link %d replaced by %d after Prepare", prog, before[prog].ID, info.ID)
		}
	}
}

// collected counts the series c serves.
func collected(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	n := 0
	for range ch {
		n++
	}
	return n
}
