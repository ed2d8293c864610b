package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

// Runner is a constructed controller.
type Runner interface {
	Run(ctx context.Context, workers int)
}

// Constructor builds one controller from the shared pieces. It is called
// only once this copy is the leader, so a standby holds no informers.
type Constructor func(client kubernetes.Interface, factory informers.SharedInformerFactory, recorder record.EventRecorder, log *slog.Logger) (Runner, error)

// Controller is one named controller and its worker count.
type Controller struct {
	Name    string
	Workers int
	New     Constructor
	// Metrics, when set, are the controller's metrics, served on /metrics
	// from the start: they are made with the options, before any term of
	// leadership builds the controller.
	Metrics prometheus.Collector
}

// LeaderElection configures the Lease lock.
type LeaderElection struct {
	Enabled       bool
	Namespace     string
	Name          string
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Config is everything Run needs.
type Config struct {
	RESTConfig     *rest.Config
	Controllers    []Controller
	LeaderElection LeaderElection
	// HealthzAddr serves /healthz, /readyz and /metrics ("" = off).
	HealthzAddr string
	// ResyncPeriod of the shared informers (0 = none).
	ResyncPeriod time.Duration
	Log          *slog.Logger
}

// Run blocks until ctx ends (nil) or leadership is lost (error: the process
// should exit and restart as a standby, as kube-controller-manager does).
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if len(cfg.Controllers) == 0 {
		return errors.New("--controllers: no controller enabled")
	}
	client, err := kubernetes.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return fmt.Errorf("build client: %w", err)
	}
	m := &manager{cfg: cfg, client: client, log: cfg.Log}
	if cfg.HealthzAddr != "" {
		stop, err := m.serve(cfg.HealthzAddr)
		if err != nil {
			return err
		}
		defer stop()
	}
	if !cfg.LeaderElection.Enabled {
		m.leader.Store(true)
		return m.runControllers(ctx)
	}
	return m.elect(ctx)
}

type manager struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
	leader atomic.Bool
	reg    *prometheus.Registry
}

func (m *manager) elect(ctx context.Context) error {
	le := m.cfg.LeaderElection
	if le.Identity == "" {
		host, _ := os.Hostname()
		le.Identity = host + "_" + string(uuid.NewUUID())
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     m.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
	}
	var lost atomic.Bool
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            le.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				m.log.Info("became leader; starting controllers", "identity", le.Identity)
				m.leader.Store(true)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := m.runControllers(lctx); err != nil {
						m.log.Error("controllers failed", "err", err)
						cancel()
					}
				}()
			},
			OnStoppedLeading: func() {
				m.leader.Store(false)
				if ctx.Err() == nil {
					lost.Store(true)
					m.log.Error("lost leadership", "identity", le.Identity)
				}
				cancel()
			},
			OnNewLeader: func(id string) {
				if id != le.Identity {
					m.log.Info("another copy leads; standing by", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("--leader-elect: %w", err)
	}
	elector.Run(runCtx)
	wg.Wait()
	if lost.Load() {
		return errors.New("leader election lost")
	}
	return nil
}

// runControllers builds every controller on one informer factory and runs
// them until ctx ends.
func (m *manager) runControllers(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(m.client, m.cfg.ResyncPeriod)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: m.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	var runners []Runner
	for _, c := range m.cfg.Controllers {
		recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nodenet-" + c.Name})
		r, err := c.New(m.client, factory, recorder, m.log.With("controller", c.Name))
		if err != nil {
			return fmt.Errorf("controller %s: %w", c.Name, err)
		}
		runners = append(runners, r)
	}
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	for i, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Run(ctx, max(m.cfg.Controllers[i].Workers, 1))
		}()
		m.log.Info("controller started", "controller", m.cfg.Controllers[i].Name)
	}
	wg.Wait()
	factory.Shutdown()
	return nil
}

func (m *manager) serve(addr string) (func(), error) {
	m.reg = prometheus.NewRegistry()
	leaderGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nodenet_controller_manager_leader", Help: "1 when this copy holds the leader lease.",
	}, func() float64 {
		if m.leader.Load() {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(leaderGauge, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range m.cfg.Controllers {
		if c.Metrics != nil {
			if err := m.reg.Register(c.Metrics); err != nil {
				return nil, fmt.Errorf("register controller %s metrics: %w", c.Name, err)
			}
		}
	}
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/livez", ok)
	mux.HandleFunc("/readyz", ok)
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--healthz-bind-address %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// Check builds every controller once on a factory that is never started, so
// that bad options fail at startup rather than after winning an election.
func Check(cfg Config) error {
	client, err := kubernetes.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return fmt.Errorf("build client: %w", err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	for _, c := range cfg.Controllers {
		if _, err := c.New(client, factory, nil, slog.New(slog.DiscardHandler)); err != nil {
			return fmt.Errorf("controller %s: %w", c.Name, err)
		}
	}
	return nil
}
