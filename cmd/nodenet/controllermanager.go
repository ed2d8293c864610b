package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

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
	"github.com/nodenet/nodenet/routes"
)

// allControllers in start order; "*" in --controllers means the ones whose
// configuration is present (node IPAM needs --cluster-cidr, LoadBalancer IPs
// --lb-ip-pool, cloud routes --configure-cloud-routes, load-balancer routes
// --configure-lb-routes).
var allControllers = []string{"nodeipam", "endpointslice", "endpoints", "loadbalancer", "nodelifecycle", "scheduler", "daemonset", "cloudroutes", "lbroutes"}

type cmFlags struct {
	kubeconfig     string
	qps            float64
	burst          int
	controllers    stringList
	clusterCIDRs   stringList
	mask, mask4    int
	mask6          int
	maxPerSlice    int
	lbPools        stringList
	graceful       time.Duration
	monitorPeriod  time.Duration
	schedulerName  string
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
	logs           logFlags
}

func (f *cmFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (empty: in-cluster config)")
	fs.Float64Var(&f.qps, "kube-api-qps", 50, "client QPS to the API server (-1: unlimited)")
	fs.IntVar(&f.burst, "kube-api-burst", 100, "client burst to the API server")
	fs.Var(&f.controllers, "controllers", "controllers to run: '*' (every configured one), or names from "+strings.Join(allControllers, ",")+"; '-name' disables one")
	fs.Var(&f.clusterCIDRs, "cluster-cidr", "cluster pod CIDR(s), one per family (enables node IPAM and bounds cloud routes)")
	fs.IntVar(&f.mask, "node-cidr-mask-size", 0, "node podCIDR prefix length for a single-stack cluster")
	fs.IntVar(&f.mask4, "node-cidr-mask-size-ipv4", 0, "IPv4 node podCIDR prefix length (default 24)")
	fs.IntVar(&f.mask6, "node-cidr-mask-size-ipv6", 0, "IPv6 node podCIDR prefix length (default 64)")
	fs.IntVar(&f.maxPerSlice, "max-endpoints-per-slice", 0, "endpoints per EndpointSlice (default 100)")
	fs.Var(&f.lbPools, "lb-ip-pool", "CIDR(s) LoadBalancer Service IPs are handed out from (enables the LoadBalancer IP controller)")
	fs.DurationVar(&f.graceful, "node-monitor-grace-period", 40*time.Second, "how long a node may go without renewing its lease before it is marked unknown")
	fs.DurationVar(&f.monitorPeriod, "node-monitor-period", time.Second, "how often node leases are checked")
	fs.StringVar(&f.schedulerName, "scheduler-name", "default-scheduler", "schedule pods whose spec.schedulerName is this")
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
	f.logs.register(fs)
}

// enabled resolves --controllers against what is configured.
func (f *cmFlags) enabled() (map[string]bool, error) {
	sel := f.controllers
	if len(sel) == 0 {
		sel = stringList{"*"}
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
				pp, err1 := netip.ParsePrefix(p)
				cc, err2 := netip.ParsePrefix(c)
				if err1 == nil && err2 == nil && pp.Overlaps(cc.Masked()) {
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

// build turns the flags into controller constructors.
func (f *cmFlags) build(on map[string]bool) ([]manager.Controller, func(), error) {
	var out []manager.Controller
	cleanup := func() {}
	add := func(name string, newFn manager.Constructor) {
		if on[name] {
			out = append(out, manager.Controller{Name: name, Workers: f.workers, New: newFn})
		}
	}
	add("nodeipam", func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return nodeipam.New(c, fac, nodeipam.Options{ClusterCIDRs: f.clusterCIDRs, NodeCIDRMaskSize: f.mask, NodeCIDRMaskSizeIPv4: f.mask4, NodeCIDRMaskSizeIPv6: f.mask6}, r, l)
	})
	add("endpointslice", func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return endpointslice.New(c, fac, endpointslice.Options{MaxEndpointsPerSlice: f.maxPerSlice}, r, l)
	})
	add("endpoints", func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return endpoints.New(c, fac, r, l)
	})
	add("loadbalancer", func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return loadbalancer.New(c, fac, loadbalancer.Options{Pools: f.lbPools}, r, l)
	})
	add("nodelifecycle", func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return nodelifecycle.New(c, fac, nodelifecycle.Options{NodeMonitorGracePeriod: f.graceful, NodeMonitorPeriod: f.monitorPeriod}, r, l)
	})
	add("scheduler", func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return scheduler.New(c, fac, scheduler.Options{SchedulerName: f.schedulerName}, r, l)
	})
	add("daemonset", func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return daemonset.New(c, fac, daemonset.Options{}, r, l)
	})
	if !on["cloudroutes"] && !on["lbroutes"] {
		return out, cleanup, nil
	}
	// One table for both: each manages only its own destinations (cluster
	// CIDRs, load-balancer pools).
	table, err := routes.NewNetlinkTable(f.routeNetns, f.routeTable, routes.ProtocolNodenet)
	if err != nil {
		return nil, nil, fmt.Errorf("--route-table-netns %q --route-table %d: %w", f.routeNetns, f.routeTable, err)
	}
	cleanup = table.Close
	add("cloudroutes", func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return cloudroutes.New(c, fac, cloudroutes.Options{Table: table, ClusterCIDRs: f.clusterCIDRs, ReconcilePeriod: f.routePeriod}, r, l)
	})
	add("lbroutes", func(c kubernetes.Interface, fac informers.SharedInformerFactory, r record.EventRecorder, l *slog.Logger) (manager.Runner, error) {
		return lbroutes.New(fac, lbroutes.Options{Table: table, Pools: f.lbPools, ReconcilePeriod: f.routePeriod}, r, l)
	})
	return out, cleanup, nil
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
	log, err := f.logs.logger("controller-manager")
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
	rc, err := restConfig(f.kubeconfig, float32(f.qps), f.burst)
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
