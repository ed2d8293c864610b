package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/internal/testapi"
)

// probeController is a controller that records what the manager did with
// it: built (with which recorder), run (with how many workers), stopped.
type probeController struct {
	name     string
	built    atomic.Int32
	running  atomic.Int32
	workers  atomic.Int32
	synced   atomic.Bool
	informer cache.SharedIndexInformer
	recorder record.EventRecorder
}

func (p *probeController) controller(workers int) Controller {
	return Controller{Name: p.name, Workers: workers, New: func(_ kubernetes.Interface, f informers.SharedInformerFactory, r record.EventRecorder, _ *slog.Logger) (Runner, error) {
		p.built.Add(1)
		p.informer, p.recorder = f.Core().V1().ConfigMaps().Informer(), r
		return p, nil
	}}
}

func (p *probeController) Run(ctx context.Context, workers int) {
	p.running.Add(1)
	defer p.running.Add(-1)
	p.workers.Store(int32(workers))
	// The manager starts the factory after building every controller.
	p.synced.Store(cache.WaitForCacheSync(ctx.Done(), p.informer.HasSynced))
	if p.recorder != nil {
		p.recorder.Event(&corev1.ObjectReference{Kind: "Namespace", Name: "default", APIVersion: "v1"}, corev1.EventTypeNormal, "ProbeRan", p.name)
	}
	<-ctx.Done()
}

// managerRun is one Run in the background.
type managerRun struct {
	cancel context.CancelFunc
	done   chan error
}

func start(cfg Config) *managerRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &managerRun{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- Run(ctx, cfg) }()
	return r
}

func (r *managerRun) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not stop within 30s")
		return nil
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// leaderMetric reads nodenet_controller_manager_leader from /metrics.
func leaderMetric(addr string) (string, error) {
	return metricValue(addr, "nodenet_controller_manager_leader")
}

// metricValue reads an unlabelled metric's value from /metrics.
func metricValue(addr, name string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in /metrics", name)
}

func TestRunRefusesNoControllers(t *testing.T) {
	if err := Run(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "--controllers") {
		t.Errorf("Run without controllers: %v", err)
	}
}

// TestCheckBuildsOnceWithoutRunning: bad options fail at startup, named
// by controller, and nothing runs.
func TestCheckBuildsOnceWithoutRunning(t *testing.T) {
	srv := testapi.Start(t)
	good := &probeController{name: "good"}
	bad := Controller{Name: "bad", New: func(kubernetes.Interface, informers.SharedInformerFactory, record.EventRecorder, *slog.Logger) (Runner, error) {
		return nil, errors.New("--frobs must be positive")
	}}
	if err := Check(Config{RESTConfig: srv.Config, Controllers: []Controller{good.controller(1), bad}}); err == nil ||
		!strings.Contains(err.Error(), "controller bad") || !strings.Contains(err.Error(), "--frobs") {
		t.Errorf("Check: %v, want the bad controller's error", err)
	}
	if good.built.Load() != 1 || good.running.Load() != 0 {
		t.Errorf("good controller built %d times, running %d", good.built.Load(), good.running.Load())
	}
	if err := Check(Config{RESTConfig: srv.Config, Controllers: []Controller{good.controller(1)}}); err != nil {
		t.Errorf("Check of a good set: %v", err)
	}
}

// TestRunWithoutElection runs every controller on one started factory,
// with a recorder whose events reach the API, and stops them with ctx.
func TestRunWithoutElection(t *testing.T) {
	srv := testapi.Start(t)
	a, b := &probeController{name: "a"}, &probeController{name: "b"}
	addr := freeAddr(t)
	// A controller's own metrics are served beside the manager's.
	withMetrics := a.controller(3)
	probeGauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodenet_probe_value", Help: "test"})
	probeGauge.Set(7)
	withMetrics.Metrics = probeGauge
	run := start(Config{RESTConfig: srv.Config, Controllers: []Controller{withMetrics, b.controller(0)}, HealthzAddr: addr, Log: testapi.Logger()})
	testapi.Eventually(t, 30*time.Second, "both controllers running with synced informers", func() bool {
		return a.running.Load() == 1 && b.running.Load() == 1 && a.synced.Load() && b.synced.Load()
	})
	if a.workers.Load() != 3 || b.workers.Load() != 1 {
		t.Errorf("workers a=%d b=%d, want 3 and at least 1", a.workers.Load(), b.workers.Load())
	}
	// One factory: the two controllers' ConfigMap informers share a store.
	if a.informer.GetIndexer() != b.informer.GetIndexer() {
		t.Error("controllers got informers from different factories")
	}
	testapi.Eventually(t, 30*time.Second, "the controllers' events", func() bool {
		evs, err := srv.Client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		seen := map[string]bool{}
		for _, e := range evs.Items {
			if e.Reason == "ProbeRan" {
				seen[e.Source.Component] = true
			}
		}
		return seen["nodenet-a"] && seen["nodenet-b"]
	})
	if v, err := leaderMetric(addr); err != nil || v != "1" {
		t.Errorf("leader gauge without election: %q, %v", v, err)
	}
	if v, err := metricValue(addr, "nodenet_probe_value"); err != nil || v != "7" {
		t.Errorf("controller's metric: %q, %v", v, err)
	}
	if err := run.stop(t); err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
	if a.running.Load() != 0 || b.running.Load() != 0 {
		t.Error("controllers still running after Run returned")
	}
}

func election(identity string) LeaderElection {
	return LeaderElection{Enabled: true, Namespace: "kube-system", Name: "nodenet-test", Identity: identity,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
}

// TestLeaderElection: of two copies only the leader builds controllers; the
// standby takes over when the leader stops, and reports itself a standby
// until then.
func TestLeaderElection(t *testing.T) {
	srv := testapi.Start(t)
	first, second := &probeController{name: "x"}, &probeController{name: "x"}
	addr1, addr2 := freeAddr(t), freeAddr(t)
	run1 := start(Config{RESTConfig: srv.Config, Controllers: []Controller{first.controller(1)}, LeaderElection: election("one"), HealthzAddr: addr1, Log: testapi.Logger()})
	testapi.Eventually(t, 30*time.Second, "the first copy leading", func() bool { return first.running.Load() == 1 })
	run2 := start(Config{RESTConfig: srv.Config, Controllers: []Controller{second.controller(1)}, LeaderElection: election("two"), HealthzAddr: addr2, Log: testapi.Logger()})
	t.Cleanup(func() { _ = run2.stop(t) })
	// The standby is up (serving) but holds no controllers.
	testapi.Eventually(t, 30*time.Second, "the standby serving /metrics", func() bool {
		v, err := leaderMetric(addr2)
		return err == nil && v == "0"
	})
	lease, err := srv.Client.CoordinationV1().Leases("kube-system").Get(context.Background(), "nodenet-test", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "one" {
		t.Fatalf("lease %+v, %v: want held by one", lease, err)
	}
	if second.built.Load() != 0 {
		t.Fatal("the standby built its controllers")
	}
	// The leader stops (releasing the lease): the standby takes over.
	if err := run1.stop(t); err != nil {
		t.Errorf("leader's Run after cancel: %v", err)
	}
	testapi.Eventually(t, 30*time.Second, "the second copy leading", func() bool { return second.running.Load() == 1 })
	if v, err := leaderMetric(addr2); err != nil || v != "1" {
		t.Errorf("new leader's gauge %q, %v", v, err)
	}
}

// TestLostLeadershipEndsRun: a leader that cannot renew its lease stops its
// controllers and returns an error, so the process restarts as a standby.
func TestLostLeadershipEndsRun(t *testing.T) {
	srv := testapi.Start(t)
	p := &probeController{name: "x"}
	run := start(Config{RESTConfig: srv.Config, Controllers: []Controller{p.controller(1)}, LeaderElection: election("one"), Log: testapi.Logger()})
	t.Cleanup(func() { run.cancel() })
	testapi.Eventually(t, 30*time.Second, "leading", func() bool { return p.running.Load() == 1 })
	// Another holder takes the lease for a long time.
	ctx := context.Background()
	testapi.Eventually(t, 30*time.Second, "lease taken over", func() bool {
		lease, err := srv.Client.CoordinationV1().Leases("kube-system").Get(ctx, "nodenet-test", metav1.GetOptions{})
		if err != nil {
			return false
		}
		intruder, long := "intruder", int32(3600)
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime, lease.Spec.AcquireTime = &intruder, &long, &now, &now
		_, err = srv.Client.CoordinationV1().Leases("kube-system").Update(ctx, lease, metav1.UpdateOptions{})
		return err == nil // a conflict with the leader's renewal: try again
	})
	select {
	case err := <-run.done:
		if err == nil || !strings.Contains(err.Error(), "leader election lost") {
			t.Errorf("Run after losing the lease: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on after losing the lease")
	}
	if p.running.Load() != 0 {
		t.Error("controllers still running after leadership was lost")
	}
}
