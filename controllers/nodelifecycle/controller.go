package nodelifecycle

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodenet/nodenet/controllers/internal/ctrlutil"
	"github.com/nodenet/nodenet/controllers/internal/workers"
)

// LeaseNamespace holds the nodes' heartbeat Leases.
const LeaseNamespace = corev1.NamespaceNodeLease

// podsByNode indexes pods by spec.nodeName. The name is qualified so it
// cannot clash with another controller's index on the shared informer.
const podsByNode = "nodelifecycle.nodenet.io/nodeName"

// Controller marks nodes that stopped heartbeating.
type Controller struct {
	client   kubernetes.Interface
	opts     Options
	nodes    corelisters.NodeLister
	leases   coordinationlisters.LeaseLister
	pods     cache.Indexer
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *slog.Logger

	mu     sync.Mutex
	health map[string]*health // node name -> what we saw of its heartbeat
}

// health is the last heartbeat seen of a node and when this controller saw
// it change.
type health struct {
	signal      time.Time
	observed    time.Time
	unreachable bool
}

// New builds the controller and registers its informer handlers; the caller
// starts factory afterwards.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, opts Options, recorder record.EventRecorder, log *slog.Logger) (*Controller, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	nodeInf := factory.Core().V1().Nodes()
	leaseInf := factory.Coordination().V1().Leases()
	podInf := factory.Core().V1().Pods()
	c := &Controller{
		client:   client,
		opts:     opts,
		nodes:    nodeInf.Lister(),
		leases:   leaseInf.Lister(),
		pods:     podInf.Informer().GetIndexer(),
		synced:   []cache.InformerSynced{nodeInf.Informer().HasSynced, leaseInf.Informer().HasSynced, podInf.Informer().HasSynced},
		queue:    ctrlutil.NewQueue("nodelifecycle"),
		recorder: ctrlutil.Recorder(recorder),
		log:      cmp.Or(log, slog.Default()),
		health:   map[string]*health{},
	}
	if err := podInf.Informer().AddIndexers(cache.Indexers{podsByNode: ctrlutil.PodNodeName}); err != nil {
		return nil, fmt.Errorf("add pod index: %w", err)
	}
	if _, err := nodeInf.Informer().AddEventHandler(ctrlutil.OnChange(c.enqueueNode)); err != nil {
		return nil, fmt.Errorf("register node handler: %w", err)
	}
	if _, err := leaseInf.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: isNodeLease,
		Handler:    ctrlutil.OnChange(c.enqueueNode),
	}); err != nil {
		return nil, fmt.Errorf("register lease handler: %w", err)
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePodNode,
		UpdateFunc: func(_, obj any) { c.enqueuePodNode(obj) },
	}); err != nil {
		return nil, fmt.Errorf("register pod handler: %w", err)
	}
	return c, nil
}

func isNodeLease(obj any) bool {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	l, ok := obj.(*coordinationv1.Lease)
	return ok && l.Namespace == LeaseNamespace
}

// enqueueNode queues the node an object is about: a Node, or its Lease,
// which has the node's name.
func (c *Controller) enqueueNode(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	_, name, _ := cache.SplitMetaNamespaceKey(key)
	c.queue.Add(name)
}

// enqueuePodNode catches pods that appear on, or turn ready on, a node that
// is already unreachable; pods of healthy nodes are none of our business.
func (c *Controller) enqueuePodNode(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	c.mu.Lock()
	h := c.health[p.Spec.NodeName]
	unreachable := h != nil && h.unreachable
	c.mu.Unlock()
	if unreachable {
		c.queue.Add(p.Spec.NodeName)
	}
}

// Run blocks until ctx is done.
func (c *Controller) Run(ctx context.Context, n int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.log.Info("starting node lifecycle controller", "grace", c.opts.NodeMonitorGracePeriod, "period", c.opts.NodeMonitorPeriod)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	go wait.UntilWithContext(ctx, c.enqueueAll, c.opts.NodeMonitorPeriod)
	workers.Run(ctx, c.queue, n, "node", c.log, c.sync)
}

// enqueueAll is the periodic safety net behind the per-node deadlines.
func (c *Controller) enqueueAll(context.Context) {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, n := range nodes {
		c.queue.Add(n.Name)
	}
}
