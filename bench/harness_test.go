package bench

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/nettest"
)

// TestHarnessSmoke runs every scenario at tiny scale against a real server
// process and checks that the harness counts right. It checks no timings:
// performance figures come from the benchmarks.
func TestHarnessSmoke(t *testing.T) {
	nettest.SkipShort(t, "builds and loads a real API server process")
	const (
		n        = 50
		workers  = 8
		watchers = 5
		updates  = 50
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := StartServer(ctx, ServerOptions{})
	if err != nil {
		t.Fatalf("start nodenet apiserver: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = srv.Stop()
		}
	}()
	pid := srv.Pid()

	t.Run("create", func(t *testing.T) {
		res, err := CreateObjects(ctx, srv.Client, CreateOptions{Namespace: "smoke", N: n, Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v", res.Services)
		t.Logf("%v", res.Slices)
		for _, p := range []Phase{res.Services, res.Slices} {
			if p.N != n || p.Latency.N != n || p.PerSec <= 0 || p.Latency.P50 <= 0 || p.Latency.P50 > p.Latency.Max {
				t.Errorf("%s: implausible figures %+v", p.Kind, p)
			}
		}
		slices, err := srv.Client.DiscoveryV1().EndpointSlices("smoke").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(slices.Items) != n {
			t.Errorf("%d EndpointSlices stored, want %d", len(slices.Items), n)
		}
	})

	t.Run("list", func(t *testing.T) {
		res, err := ListServices(ctx, srv.Client, ListOptions{Namespace: "smoke", Expect: n, Runs: 2, PageSize: 20})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []ListMode{res.Etcd, res.Cache, res.Paged} {
			t.Logf("%v", m)
			if m.Items != n || m.Latency.N != 2 || m.Latency.P50 <= 0 || m.Bytes <= 0 {
				t.Errorf("%s: implausible figures %+v", m.Name, m)
			}
		}
		if res.Etcd.Pages != 1 || res.Cache.Pages != 1 || res.Paged.Pages != 3 {
			t.Errorf("pages: etcd %d, cache %d, paged %d; want 1, 1, 3", res.Etcd.Pages, res.Cache.Pages, res.Paged.Pages)
		}
		mem, err := srv.Memory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("server memory: %v", mem)
		if mem.RSS < 1<<20 || mem.PeakRSS < mem.RSS || mem.HeapInuse < 1<<20 || mem.ProcessRSS < 1<<20 {
			t.Errorf("implausible memory %+v", mem)
		}
	})

	t.Run("watch", func(t *testing.T) {
		targets := make([]string, n/2) // two updates per Service
		for i := range targets {
			targets[i] = ServiceName(i)
		}
		res, err := WatchFanout(ctx, WatchOptions{
			Namespace: "smoke", Targets: targets,
			Watchers: watchers, NewClient: srv.NewClient,
			Updates: updates, Writers: workers, Writer: srv.Client,
			DrainTimeout: 30 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v", res)
		if res.Expected != watchers*updates || res.Received != res.Expected || res.Lost != 0 || res.Duplicates != 0 || res.ClosedEarly != 0 {
			t.Errorf("want every watcher to get every update once: %+v", res)
		}
		if res.Delivery.N != watchers*updates || res.Delivery.P50 <= 0 || res.Delivery.P99 < res.Delivery.P50 || res.WriteLatency.N != updates {
			t.Errorf("implausible latencies: delivery %v, writes %v", res.Delivery, res.WriteLatency)
		}
		// A second run on the same objects must not count the first's events.
		again, err := WatchFanout(ctx, WatchOptions{
			Namespace: "smoke", Targets: targets[:1],
			Watchers: 2, NewClient: srv.NewClient,
			Updates: 3, Writers: 1, Writer: srv.Client,
			DrainTimeout: 30 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		if again.Received != 6 || again.Lost != 0 || again.Duplicates != 0 {
			t.Errorf("second run: %+v", again)
		}
	})

	// Stop leaves neither the process nor the temp dir behind.
	stopped = true
	if err := srv.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("server process %d still there after Stop (kill -0: %v)", pid, err)
	}
	if _, err := os.Stat(srv.Dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s still there after Stop (%v)", srv.Dir, err)
	}
}

// TestStartFailureLeavesNothing: a server that cannot start is reported with
// its log, and neither its process nor its temp dir survive.
func TestStartFailureLeavesNothing(t *testing.T) {
	nettest.SkipShort(t, "builds and starts API server processes")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := BuildBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	srv, err := StartServer(ctx, ServerOptions{Binary: bin, ExtraArgs: []string{"--no-such-flag"}})
	if err == nil {
		_ = srv.Stop()
		t.Fatal("server started with an unknown flag")
	}
	if !strings.Contains(err.Error(), "exited during start-up") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("error does not say what happened: %v", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temp dir left behind: %v", left)
	}
}

func TestPercentiles(t *testing.T) {
	d := make([]time.Duration, 100)
	for i := range d {
		d[i] = time.Duration(100-i) * time.Millisecond
	}
	l := Summarize(d)
	if l.N != 100 || l.Min != time.Millisecond || l.P50 != 50*time.Millisecond || l.P99 != 99*time.Millisecond || l.Max != 100*time.Millisecond {
		t.Errorf("Summarize(1..100ms) = %+v", l)
	}
	if one := Summarize([]time.Duration{7}); one.P50 != 7 || one.P99 != 7 {
		t.Errorf("Summarize([7]) = %+v", one)
	}
	if (Summarize(nil) != Latency{}) {
		t.Errorf("Summarize(nil) not zero")
	}
}
