package lbroutes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodenet/nodenet/controllers/internal/ctrlutil"
	"github.com/nodenet/nodenet/controllers/internal/workers"
	"github.com/nodenet/nodenet/controllers/loadbalancer"
	"github.com/nodenet/nodenet/routes"
)

// DefaultReconcilePeriod is how often the table is compared with the
// Services even without a change, which repairs routes removed by hand.
const DefaultReconcilePeriod = 10 * time.Second

// Options configure the controller.
type Options struct {
	// Table is the VPC router's routing table, opened by the caller.
	Table routes.Table
	// Pools (--lb-ip-pool, as loadbalancer.Options.Pools) bound what the
	// controller manages: only host routes to addresses inside them are
	// created or deleted.
	Pools []netip.Prefix
	// ReconcilePeriod; zero means DefaultReconcilePeriod.
	ReconcilePeriod time.Duration
}

// syncKey is the only queue key: the table is reconciled as a whole.
const syncKey = "all"

// Controller keeps one route per LoadBalancer IP in the VPC router.
type Controller struct {
	table    routes.Table
	pools    []netip.Prefix
	period   time.Duration
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	slices   discoverylisters.EndpointSliceLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *slog.Logger
	// unserved remembers which addresses had no node, so that is logged
	// and recorded when it starts, not on every resync. Only sync uses it.
	unserved map[string]string
}

// Validate reports what is wrong with o; New refuses the same.
func (o Options) Validate() error {
	var errs []error
	if err := loadbalancer.ValidatePools(o.Pools); err != nil {
		errs = append(errs, err)
	}
	if o.Table == nil {
		errs = append(errs, errors.New("no route table given"))
	}
	if o.ReconcilePeriod < 0 {
		errs = append(errs, fmt.Errorf("reconcile period %v: must be positive", o.ReconcilePeriod))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("load-balancer routes: %w", err)
	}
	return nil
}

// New validates opts and registers the informer handlers on factory; start
// the factory afterwards.
func New(factory informers.SharedInformerFactory, opts Options, recorder record.EventRecorder, log *slog.Logger) (*Controller, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		table:    opts.Table,
		pools:    opts.Pools,
		period:   cmp.Or(opts.ReconcilePeriod, DefaultReconcilePeriod),
		queue:    ctrlutil.NewQueue("lbroutes"),
		recorder: ctrlutil.Recorder(recorder),
		log:      cmp.Or(log, slog.New(slog.DiscardHandler)).With("controller", "lbroutes"),
		unserved: map[string]string{},
	}
	// Any change may move a route; one key collapses bursts into one sync.
	nudge := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.queue.Add(syncKey) },
		UpdateFunc: func(_, _ any) { c.queue.Add(syncKey) },
		DeleteFunc: func(any) { c.queue.Add(syncKey) },
	}
	svc, node, eps := factory.Core().V1().Services(), factory.Core().V1().Nodes(), factory.Discovery().V1().EndpointSlices()
	c.services, c.nodes, c.slices = svc.Lister(), node.Lister(), eps.Lister()
	for _, inf := range []cache.SharedIndexInformer{svc.Informer(), node.Informer(), eps.Informer()} {
		reg, err := inf.AddEventHandler(nudge)
		if err != nil {
			return nil, fmt.Errorf("load-balancer routes: register handler: %w", err)
		}
		c.synced = append(c.synced, reg.HasSynced)
	}
	return c, nil
}

// Run syncs until ctx ends, at least every reconcile period.
func (c *Controller) Run(ctx context.Context, n int) {
	c.log.Info("starting", "pools", fmt.Sprint(c.pools), "period", c.period)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	// At once (even with no Service, stale routes must go) and then every
	// period.
	go wait.UntilWithContext(ctx, func(context.Context) { c.queue.Add(syncKey) }, c.period)
	workers.Run(ctx, c.queue, n, "table", c.log, func(ctx context.Context, _ string) error { return c.sync(ctx) })
}

// sync makes the managed routes match the Services: adds first (Add
// replaces a route whose node changed in place), then deletes.
func (c *Controller) sync(ctx context.Context) error {
	svcs, err := c.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	eps, err := c.slices.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list endpointslices: %w", err)
	}
	want, unserved := planRoutes(svcs, nodes, eps, c.pools)
	c.report(svcs, unserved)
	listed, err := c.table.List(ctx)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	listed = slices.DeleteFunc(listed, func(r routes.Route) bool { return !managed(c.pools, r.Dst) })
	desired := make([]routes.Route, len(want))
	for i, t := range want {
		desired[i] = t.route
	}
	add, del := routes.Diff(desired, listed)
	var errs []error
	for _, r := range add {
		t := want[slices.IndexFunc(want, func(t target) bool { return t.route == r })]
		if err := c.table.Add(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("route %s for %s: %w", r, t.service, err))
			c.event(svcs, t.service, corev1.EventTypeWarning, "FailedToRoute", "Could not route %s to node %s: %v", r.Dst.Addr(), t.node, err)
			continue
		}
		c.log.Info("routed load-balancer IP", "service", t.service, "node", t.node, "route", r.String())
		c.event(svcs, t.service, corev1.EventTypeNormal, "LoadBalancerRouted", "VPC router sends %s to node %s (%s)", r.Dst.Addr(), t.node, r.Gw)
	}
	for _, r := range del {
		if err := c.table.Delete(ctx, r); err != nil && !errors.Is(err, routes.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		c.log.Info("deleted load-balancer route", "route", r.String())
	}
	return errors.Join(errs...)
}

// report says once, when it starts, that a Service's address has no node.
func (c *Controller) report(svcs []*corev1.Service, unserved map[string][]netip.Addr) {
	now := map[string]string{}
	for k, addrs := range unserved {
		now[k] = fmt.Sprint(addrs)
		if c.unserved[k] != now[k] {
			c.log.Warn("no node can take load-balancer IPs", "service", k, "ips", now[k])
			c.event(svcs, k, corev1.EventTypeWarning, "NoNodeForLoadBalancerIP",
				"No Ready node (with a ready endpoint, for externalTrafficPolicy Local) for %s: the address is unreachable", now[k])
		}
	}
	c.unserved = now
}

func (c *Controller) event(svcs []*corev1.Service, k, typ, reason, format string, args ...any) {
	if i := slices.IndexFunc(svcs, func(s *corev1.Service) bool { return key(s) == k }); i >= 0 {
		c.recorder.Eventf(svcs[i], typ, reason, format, args...)
	}
}
