package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/controllers/cloudroutes"
	"github.com/nodenet/nodenet/controllers/daemonset"
	"github.com/nodenet/nodenet/controllers/endpoints"
	"github.com/nodenet/nodenet/controllers/endpointslice"
	"github.com/nodenet/nodenet/controllers/lbroutes"
	"github.com/nodenet/nodenet/controllers/loadbalancer"
	"github.com/nodenet/nodenet/controllers/manager"
	"github.com/nodenet/nodenet/controllers/nodeipam"
	"github.com/nodenet/nodenet/controllers/nodelifecycle"
	"github.com/nodenet/nodenet/controllers/scheduler"
	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/routes"
)

// allControllers in start order; "*" in --controllers means the ones whose
// configuration is present (node IPAM needs --cluster-cidr, LoadBalancer IPs
// --lb-ip-pool, cloud routes --configure-cloud-routes, load-balancer routes
// --configure-lb-routes).
var allControllers = []string{"nodeipam", "endpointslice", "endpoints", "loadbalancer", "nodelifecycle", "scheduler", "daemonset", "cloudroutes", "lbroutes"}

// cmFlags are controller-manager's flags, parsed into the controllers'
// typed options.
type cmFlags struct {
	kubeconfig     string
	qps            float64
	burst          int
	controllers    cli.StringList
	clusterCIDRs   []netip.Prefix
	lbPools        []netip.Prefix
	ipam           nodeipam.Options // ClusterCIDRs come from clusterCIDRs
	slices         endpointslice.Options
	lifecycle      nodelifecycle.Options
	sched          scheduler.Options
	cloudRoutes    bool
	lbRoutes       bool
	routeNetns     string
	routeTable     int
	routePeriod    time.Duration
	workers        int
	healthz        string
	leaderElect    bool
	leaseNamespace string
	leaseName      string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	identity       string
	logs           cli.LogFlags
}

func (f *cmFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (empty: in-cluster config)")
	fs.Float64Var(&f.qps, "kube-api-qps", 50, "client QPS to the API server (-1: unlimited)")
	fs.IntVar(&f.burst, "kube-api-burst", 100, "client burst to the API server")
	fs.Var(&f.controllers, "controllers", "controllers to run: '*' (every configured one), or names from "+strings.Join(allControllers, ",")+"; '-name' disables one")
	fs.Var(cli.NewCIDRsFlag(&f.clusterCIDRs, cidrlist.DualStack), "cluster-cidr", "cluster pod CIDR(s), one per family (enables node IPAM and bounds cloud routes)")
	fs.IntVar(&f.ipam.NodeCIDRMaskSize, "node-cidr-mask-size", 0, "node podCIDR prefix length for a single-stack cluster")
	fs.IntVar(&f.ipam.NodeCIDRMaskSizeIPv4, "node-cidr-mask-size-ipv4", 0, "IPv4 node podCIDR prefix length (default 24)")
	fs.IntVar(&f.ipam.NodeCIDRMaskSizeIPv6, "node-cidr-mask-size-ipv6", 0, "IPv6 node podCIDR prefix length (default 64)")
	fs.IntVar(&f.slices.MaxEndpointsPerSlice, "max-endpoints-per-slice", 0, "endpoints per EndpointSlice (default 100)")
	fs.Var(cli.NewCIDRsFlag(&f.lbPools, cidrlist.Pools), "lb-ip-pool", "CIDR(s) LoadBalancer Service IPs are handed out from (enables the LoadBalancer IP controller)")
	fs.DurationVar(&f.lifecycle.NodeMonitorGracePeriod, "node-monitor-grace-period", 40*time.Second, "how long a node may go without renewing its lease before it is marked unknown")
	fs.DurationVar(&f.lifecycle.NodeMonitorPeriod, "node-monitor-period", time.Second, "how often node leases are checked")
	fs.StringVar(&f.sched.SchedulerName, "scheduler-name", "default-scheduler", "schedule pods whose spec.schedulerName is this")
	fs.BoolVar(&f.cloudRoutes, "configure-cloud-routes", false, "program one route per node podCIDR into the route table")
	fs.BoolVar(&f.lbRoutes, "configure-lb-routes", false, "program one route per LoadBalancer IP of --lb-ip-pool, via a node that can serve it, into the route table (what a cloud load balancer does)")
	fs.StringVar(&f.routeNetns, "route-table-netns", "", "network namespace (name or path) holding the route table; empty: this one")
	fs.IntVar(&f.routeTable, "route-table", routes.MainTable, "routing table id for cloud routes")
	fs.DurationVar(&f.routePeriod, "route-reconciliation-period", 10*time.Second, "how often cloud routes are compared with the nodes")
	fs.IntVar(&f.workers, "concurrent-syncs", 5, "workers per controller")
	fs.StringVar(&f.healthz, "healthz-bind-address", "127.0.0.1:10257", "address for /healthz and /metrics (empty: off)")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "run with leader election so that only one copy acts")
	fs.StringVar(&f.leaseNamespace, "leader-elect-resource-namespace", "kube-system", "namespace of the leader Lease")
	fs.StringVar(&f.leaseName, "leader-elect-resource-name", "nodenet-controller-manager", "name of the leader Lease")
	fs.DurationVar(&f.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a standby waits before taking over an unrenewed lease")
	fs.DurationVar(&f.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before giving up")
	fs.DurationVar(&f.retryPeriod, "leader-elect-retry-period", 2*time.Second, "how often to try to acquire or renew")
	fs.StringVar(&f.identity, "leader-elect-identity", "", "identity in the Lease (default hostname_uuid)")
	f.logs.Register(fs)
}

// enabled resolves --controllers against what is configured.
func (f *cmFlags) enabled() (map[string]bool, error) {
	sel := f.controllers
	if len(sel) == 0 {
		sel = cli.StringList{"*"}
	}
	on := map[string]bool{}
	for _, s := range sel {
		name, off := strings.CutPrefix(s, "-")
		switch {
		case name == "*":
			for _, c := range allControllers {
				on[c] = f.configured(c)
			}
		case !slices.Contains(allControllers, name):
			return nil, fmt.Errorf("--controllers: unknown controller %q (known: %s)", name, strings.Join(allControllers, ", "))
		default:
			on[name] = !off
		}
	}
	if on["nodeipam"] && len(f.clusterCIDRs) == 0 {
		return nil, fmt.Errorf("--controllers: nodeipam needs --cluster-cidr")
	}
	if on["loadbalancer"] && len(f.lbPools) == 0 {
		return nil, fmt.Errorf("--controllers: loadbalancer needs --lb-ip-pool")
	}
	if on["cloudroutes"] && !f.cloudRoutes {
		return nil, fmt.Errorf("--controllers: cloudroutes needs --configure-cloud-routes")
	}
	if on["lbroutes"] && (!f.lbRoutes || len(f.lbPools) == 0) {
		return nil, fmt.Errorf("--controllers: lbroutes needs --configure-lb-routes and --lb-ip-pool")
	}
	if on["lbroutes"] && on["cloudroutes"] {
		// They share the route table and each deletes what it does not
		// want inside its own ranges.
		for _, p := range f.lbPools {
			for _, c := range f.clusterCIDRs {
				if p.Overlaps(c) {
					return nil, fmt.Errorf("--lb-ip-pool %s overlaps --cluster-cidr %s; the routes of both live in one table", p, c)
				}
			}
		}
	}
	return on, nil
}

func (f *cmFlags) configured(name string) bool {
	switch name {
	case "nodeipam":
		return len(f.clusterCIDRs) > 0
	case "loadbalancer":
		return len(f.lbPools) > 0
	case "cloudroutes":
		return f.cloudRoutes
	case "lbroutes":
		return f.lbRoutes && len(f.lbPools) > 0
	}
	return true
}

// validator is a controller's typed options.
type validator interface{ Validate() error }

// build turns the flags into controller constructors. It validates the
// options of every enabled controller first: the constructors run only
// once this copy leads, and a bad flag must fail the start, not the
// election.
func (f *cmFlags) build(on map[string]bool) ([]manager.Controller, func(), error) {
	var (
		out  []manager.Controller
		errs []error
	)
	cleanup := func() {}
	addWithMetrics := func(name string, opts validator, metrics prometheus.Collector, newFn manager.Constructor) {
		if !on[name] {
			return
		}
		if opts != nil {
			if err := opts.Validate(); err != nil {
				errs = append(errs, err)
				return
			}
		}
		out = append(out, manager.Controller{Name: name, Workers: f.workers, New: newFn, Metrics: metrics})
	}
	add := func(name string, opts validator, newFn manager.Constructor) { addWithMetrics(name, opts, nil, newFn) }
	ipam := f.ipam
	ipam.ClusterCIDRs = f.clusterCIDRs
	add("nodeipam", ipam, func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return nodeipam.New(c, fac, ipam, r, l)
	})
	add("endpointslice", f.slices, func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return endpointslice.New(c, fac, f.slices, r, l)
	})
	add("endpoints", nil, func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return endpoints.New(c, fac, r, l)
	})
	lb := loadbalancer.Options{Pools: f.lbPools}
	add("loadbalancer", lb, func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return loadbalancer.New(c, fac, lb, r, l)
	})
	add("nodelifecycle", f.lifecycle, func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return nodelifecycle.New(c, fac, f.lifecycle, r, l)
	})
	add("scheduler", f.sched, func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return scheduler.New(c, fac, f.sched, r, l)
	})
	ds := daemonset.Options{}
	add("daemonset", ds, func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return daemonset.New(c, fac, ds, r, l)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	if !on["cloudroutes"] && !on["lbroutes"] {
		return out, cleanup, nil
	}
	// One table for both: each manages only its own destinations (cluster
	// CIDRs, load-balancer pools).
	table, err := routes.NewNetlinkTable(f.routeNetns, f.routeTable, routes.ProtocolNodenet)
	if err != nil {
		return nil, nil, fmt.Errorf("--route-table-netns %q --route-table %d: %w", f.routeNetns, f.routeTable, err)
	}
	// The table's netlink watch repairs a route deleted by hand at once;
	// the reconcile period is the bound when a notice is lost.
	cloud := cloudroutes.Options{Table: table, ClusterCIDRs: f.clusterCIDRs, ReconcilePeriod: f.routePeriod,
		Watcher: table, Metrics: cloudroutes.NewMetrics()}
	addWithMetrics("cloudroutes", cloud, cloud.Metrics, func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return cloudroutes.New(c, fac, cloud, r, l)
	})
	lbr := lbroutes.Options{Table: table, Pools: f.lbPools, ReconcilePeriod: f.routePeriod}
	add("lbroutes", lbr, func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return lbroutes.New(fac, lbr, r, l)
	})
	if err := errors.Join(errs...); err != nil {
		table.Close()
		return nil, nil, err
	}
	return out, table.Close, nil
}

func runControllerManager(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("controller-manager", flag.ContinueOnError)
	var f cmFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	log, err := f.logs.Logger("controller-manager")
	if err != nil {
		return err
	}
	on, err := f.enabled()
	if err != nil {
		return err
	}
	ctrls, cleanup, err := f.build(on)
	if err != nil {
		return err
	}
	defer cleanup()
	rc, err := cli.RestConfig(f.kubeconfig, float32(f.qps), f.burst, component())
	if err != nil {
		return err
	}
	cfg := manager.Config{
		RESTConfig:  rc,
		Controllers: ctrls,
		HealthzAddr: f.healthz,
		Log:         log,
		LeaderElection: manager.LeaderElection{
			Enabled: f.leaderElect, Namespace: f.leaseNamespace, Name: f.leaseName, Identity: f.identity,
			LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod,
		},
	}
	if err := manager.Check(cfg); err != nil {
		return err
	}
	return manager.Run(ctx, cfg)
}
