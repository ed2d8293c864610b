package nodeipam

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodenet/nodenet/controllers/internal/ctrlutil"
	"github.com/nodenet/nodenet/controllers/internal/workers"
	"github.com/nodenet/nodenet/ipam/cidrset"
)

// Event reasons recorded on Nodes.
const (
	// ReasonCIDRNotAvailable: the cluster CIDR is exhausted; the Node waits.
	ReasonCIDRNotAvailable = "CIDRNotAvailable"
	// ReasonInvalidPodCIDR: the Node holds a CIDR the controller cannot
	// account for; it is left alone.
	ReasonInvalidPodCIDR = "InvalidPodCIDR"
)

// Controller assigns pod CIDRs to Nodes. It is single-use: Run once.
type Controller struct {
	client   kubernetes.Interface
	nodes    corelisters.NodeLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *slog.Logger

	// mu guards everything below: workers allocate in parallel, and a
	// choice must be visible to the next worker before its PATCH is sent.
	mu   sync.Mutex
	sets []*cidrset.Set // one per cluster CIDR, primary family first
	// owners maps every used CIDR to the Node that holds or will get it.
	owners map[netip.Prefix]string
	// byNode is what each Node holds (written) or is about to get.
	byNode map[string]*assignment
	// claims lists further Nodes that hold a CIDR already owned by another
	// Node; when the owner goes, the CIDR passes to them instead of being
	// freed, so it is never handed out a third time.
	claims map[netip.Prefix][]string
	// waiting are Nodes that found the cluster CIDR full; they are
	// requeued whenever a CIDR is released. The value tells whether their
	// NetworkUnavailable condition is written (the cache may lag behind).
	waiting map[string]bool
	// warned remembers the last problem reported per Node so that resyncs
	// do not repeat the Event.
	warned map[string]string
}

// assignment is the CIDRs of one Node, in set order when complete.
type assignment struct {
	cidrs []netip.Prefix
	// uid is set once the Node (this incarnation) is known to hold cidrs
	// in the API: from its object, or from a successful PATCH that the
	// informer has not delivered yet.
	uid types.UID
}

// New validates opts and registers the controller's handlers on the node
// informer of factory; the caller starts factory after New. recorder may be
// nil.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, opts Options,
	recorder record.EventRecorder, log *slog.Logger) (*Controller, error) {
	sets, err := opts.newSets()
	if err != nil {
		return nil, err
	}
	informer := factory.Core().V1().Nodes()
	c := &Controller{
		client:   client,
		nodes:    informer.Lister(),
		recorder: ctrlutil.Recorder(recorder),
		log:      cmp.Or(log, slog.Default()).With("controller", "nodeipam"),
		queue:    ctrlutil.NewQueue("nodeipam"),
		sets:     sets,
		owners:   map[netip.Prefix]string{},
		byNode:   map[string]*assignment{},
		claims:   map[netip.Prefix][]string{},
		waiting:  map[string]bool{},
		warned:   map[string]string{},
	}
	reg, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(old, cur any) {
			if relevantUpdate(old, cur) {
				c.enqueue(cur)
			}
		},
		DeleteFunc: c.enqueue,
	})
	if err != nil {
		return nil, fmt.Errorf("register node handlers: %w", err)
	}
	c.synced = reg.HasSynced
	for _, s := range sets {
		c.log.Info("cluster CIDR", "cidr", s.ClusterCIDR(), "nodeMask", s.MaskSize(), "subnets", s.Size())
	}
	return c, nil
}

// enqueue handles tombstones too: the sync of a Node missing from the
// cache is its release.
func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		c.log.Error("node key", "err", err)
		return
	}
	c.queue.Add(key)
}

// relevantUpdate filters out what most Node updates are (the kubelet's
// status heartbeats, flanneld's annotations): they change nothing this
// controller looks at, and a large cluster sends hundreds a second.
func relevantUpdate(old, cur any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return o.UID != n.UID || !hasCIDRs(n) || n.Spec.PodCIDR != o.Spec.PodCIDR ||
		!slices.Equal(n.Spec.PodCIDRs, o.Spec.PodCIDRs) ||
		hasUnavailable(n, corev1.ConditionTrue, ConditionReasonNoCIDR)
}

// Run assigns CIDRs with the given number of workers until ctx is done,
// and returns once they have stopped.
func (c *Controller) Run(ctx context.Context, n int) {
	defer c.queue.ShutDown()
	c.log.Info("starting; waiting for the node cache")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return
	}
	// Every CIDR already held must be occupied before the first choice,
	// or a restarted controller could hand one out twice.
	occupied := c.occupyExisting()
	c.log.Info("occupied existing node CIDRs", "nodes", occupied, "inUse", c.inUse())

	workers.Loop(ctx, c.queue, n, c.processNext)
	c.log.Info("stopped")
}

func (c *Controller) processNext(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	err := c.sync(ctx, name)
	if err == nil {
		c.queue.Forget(name)
		return true
	}
	if ctx.Err() == nil {
		level := slog.LevelWarn
		if cidrset.IsFull(err) {
			level = slog.LevelDebug // already reported by an Event
		}
		c.log.Log(ctx, level, "sync node, will retry", "node", name, "retries", c.queue.NumRequeues(name), "err", err)
	}
	c.queue.AddRateLimited(name)
	return true
}

// inUse returns the used subnets per cluster CIDR, for logs.
func (c *Controller) inUse() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.sets))
	for _, s := range c.sets {
		m[s.ClusterCIDR().String()] = s.InUse()
	}
	return m
}
