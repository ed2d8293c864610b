package cloudroutes

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodenet/nodenet/controllers/internal/ctrlutil"
	"github.com/nodenet/nodenet/controllers/internal/workers"
	"github.com/nodenet/nodenet/internal/periodic"
	"github.com/nodenet/nodenet/routes"
)

// syncKey is the only queue key: the table is reconciled as a whole, so
// bursts of node changes collapse into one sync.
const syncKey = "all"

// Controller keeps the route table in line with the nodes.
type Controller struct {
	config
	client   kubernetes.Interface
	nodes    corelisters.NodeLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *slog.Logger

	// skipped remembers why podCIDRs got no route, so the reason is logged
	// when it appears rather than on every resync. Only sync touches it
	// and programmed, and the queue never runs one key twice at once.
	skipped map[podCIDRKey]string
	// programmed are the routes the last sync left in place, by
	// destination: one of them missing from the table is a repair.
	programmed map[netip.Prefix]routes.Route
	// deleted is when the Watcher reported each managed route deleted.
	deleted deletions
}

// deletions records when routes were reported deleted: the watch writes,
// a sync that puts a route back takes its entry.
type deletions struct {
	mu sync.Mutex
	at map[netip.Prefix]time.Time
}

func (d *deletions) record(dst netip.Prefix, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at == nil {
		d.at = map[netip.Prefix]time.Time{}
	}
	d.at[dst] = at
}

func (d *deletions) take(dst netip.Prefix) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.at[dst]
	delete(d.at, dst)
	return at, ok
}

// forget drops the entries of destinations we no longer route (our own
// deletes are reported too).
func (d *deletions) forget(routed map[netip.Prefix]routes.Route) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for dst := range d.at {
		if _, ok := routed[dst]; !ok {
			delete(d.at, dst)
		}
	}
}

// New validates opts and registers the node handlers on factory; start
// the factory after New so the node informer it requested runs.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, opts Options, recorder record.EventRecorder, log *slog.Logger) (*Controller, error) {
	cfg, err := opts.validate()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		config:     cfg,
		client:     client,
		recorder:   ctrlutil.Recorder(recorder),
		log:        cmp.Or(log, slog.New(slog.DiscardHandler)).With("controller", "cloudroutes"),
		queue:      ctrlutil.NewQueue("cloudroutes"),
		skipped:    map[podCIDRKey]string{},
		programmed: map[netip.Prefix]routes.Route{},
	}
	informer := factory.Core().V1().Nodes()
	c.nodes = informer.Lister()
	reg, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.queue.Add(syncKey) },
		UpdateFunc: func(oldObj, newObj any) {
			oldNode, ok1 := oldObj.(*corev1.Node)
			newNode, ok2 := newObj.(*corev1.Node)
			if !ok1 || !ok2 || routeRelevantChange(oldNode, newNode) {
				c.queue.Add(syncKey)
			}
		},
		DeleteFunc: func(any) { c.queue.Add(syncKey) },
	})
	if err != nil {
		return nil, fmt.Errorf("cloud routes: register node handler: %w", err)
	}
	c.synced = reg.HasSynced
	return c, nil
}

// routeRelevantChange filters node updates: the kubelet rewrites status
// every few seconds, and only podCIDRs, InternalIPs and the network
// condition bear on routes.
func routeRelevantChange(oldNode, newNode *corev1.Node) bool {
	return oldNode.Spec.PodCIDR != newNode.Spec.PodCIDR ||
		!slices.Equal(oldNode.Spec.PodCIDRs, newNode.Spec.PodCIDRs) ||
		!slices.Equal(internalIPs(oldNode), internalIPs(newNode)) ||
		networkAvailable(oldNode) != networkAvailable(newNode)
}

func internalIPs(n *corev1.Node) []string {
	var ips []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ips = append(ips, a.Address)
		}
	}
	return ips
}

// Run syncs until ctx is done, then shuts the queue down. Workers beyond
// one only wait: there is a single key.
func (c *Controller) Run(ctx context.Context, n int) {
	c.log.Info("starting", "clusterCIDRs", fmt.Sprint(c.clusterCIDRs), "period", c.period, "watch", c.watcher != nil)
	defer c.log.Info("stopped")
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return
	}
	c.queue.Add(syncKey) // even with no nodes: stale routes must go
	go periodic.Every(ctx, c.period, func(context.Context) { c.queue.Add(syncKey) })
	if c.watcher != nil {
		var wg sync.WaitGroup
		defer wg.Wait() // the subscription's socket closes with it
		wg.Go(func() { c.watch(ctx) })
	}
	workers.Loop(ctx, c.queue, n, c.processNext)
}

// watch keeps a Watcher running, so that a route deleted behind our back
// is put back within a sync rather than a reconcile period. A failed
// watch is restarted after a pause (the periodic resync covers the gap),
// and every (re)start queues a sync for the changes it did not see.
func (c *Controller) watch(ctx context.Context) {
	subscribed := func() { c.queue.Add(syncKey) }
	for {
		err := c.watcher.Watch(ctx, subscribed, c.routeChanged)
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("route watch ended; restarting it, the periodic resync covers the gap", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Second, c.period)):
		}
	}
}

// routeChanged is the Watcher's handler: it records when a managed route
// vanished and nudges a sync, and touches nothing else. Our own adds and
// deletes come back here too; the sync they cause finds nothing to do.
func (c *Controller) routeChanged(ch routes.RouteChange) {
	if !c.managed(ch.Route.Dst) {
		return
	}
	if ch.Deleted {
		c.deleted.record(ch.Route.Dst, time.Now())
	}
	c.queue.Add(syncKey)
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx); err != nil {
		if ctx.Err() == nil {
			c.log.Error("sync failed, will retry", "err", err)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}
