package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodenet/nodenet/controllers/internal/ctrlutil"
	"github.com/nodenet/nodenet/controllers/internal/workers"
)

// podsByNode indexes pods by spec.nodeName. The name is qualified so it
// cannot clash with another controller's index on the shared informer.
const podsByNode = "scheduler.nodenet.io/nodeName"

// Controller binds pods to nodes.
type Controller struct {
	client   kubernetes.Interface
	opts     Options
	pods     corelisters.PodLister
	podIndex cache.Indexer
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *slog.Logger

	// mu serialises placement decisions: each must see the bindings the
	// previous ones made.
	mu      sync.Mutex
	assumed map[string]assumedPod // pod key -> binding the informer has not shown yet

	unschedMu     sync.Mutex
	unschedulable map[string]bool // pod keys that fit nowhere last time
}

type assumedPod struct {
	uid  types.UID
	node string
}

// New builds the scheduler and registers its informer handlers; the caller
// starts factory afterwards.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, opts Options, recorder record.EventRecorder, log *slog.Logger) (*Controller, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	podInf := factory.Core().V1().Pods()
	nodeInf := factory.Core().V1().Nodes()
	c := &Controller{
		client:        client,
		opts:          opts,
		pods:          podInf.Lister(),
		podIndex:      podInf.Informer().GetIndexer(),
		nodes:         nodeInf.Lister(),
		synced:        []cache.InformerSynced{podInf.Informer().HasSynced, nodeInf.Informer().HasSynced},
		queue:         ctrlutil.NewQueue("scheduler"),
		recorder:      ctrlutil.Recorder(recorder),
		log:           cmp.Or(log, slog.Default()),
		assumed:       map[string]assumedPod{},
		unschedulable: map[string]bool{},
	}
	if err := podInf.Informer().AddIndexers(cache.Indexers{podsByNode: ctrlutil.PodNodeName}); err != nil {
		return nil, fmt.Errorf("add pod index: %w", err)
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPod,
		UpdateFunc: c.onPodUpdate,
		DeleteFunc: c.onPod,
	}); err != nil {
		return nil, fmt.Errorf("register pod handler: %w", err)
	}
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.retryUnschedulable() },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if ok1 && ok2 && mayFitMore(o, n) {
				c.retryUnschedulable()
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("register node handler: %w", err)
	}
	return c, nil
}

func (c *Controller) onPod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.SchedulerName == c.opts.SchedulerName && p.Spec.NodeName == "" {
		c.enqueue(p)
	}
}

// onPodUpdate ignores status-only updates: our own PodScheduled condition
// would otherwise trigger another attempt for every failed one.
func (c *Controller) onPodUpdate(old, cur any) {
	o, ok1 := old.(*corev1.Pod)
	p, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 {
		return
	}
	if apiequality.Semantic.DeepEqual(o.Spec, p.Spec) && apiequality.Semantic.DeepEqual(o.Labels, p.Labels) &&
		o.DeletionTimestamp.Equal(p.DeletionTimestamp) && o.Status.Phase == p.Status.Phase {
		return
	}
	c.onPod(cur)
}

func (c *Controller) enqueue(p *corev1.Pod) { ctrlutil.Enqueue(c.queue, p) }

// mayFitMore reports whether a node change can let a pod fit that did not.
func mayFitMore(old, cur *corev1.Node) bool {
	return !apiequality.Semantic.DeepEqual(old.Labels, cur.Labels) ||
		!apiequality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints) ||
		old.Spec.Unschedulable != cur.Spec.Unschedulable ||
		isReady(old) != isReady(cur)
}

func (c *Controller) retryUnschedulable() {
	c.unschedMu.Lock()
	defer c.unschedMu.Unlock()
	for key := range c.unschedulable {
		c.queue.Add(key)
	}
}

func (c *Controller) setUnschedulable(key string, unschedulable bool) {
	c.unschedMu.Lock()
	defer c.unschedMu.Unlock()
	if unschedulable {
		c.unschedulable[key] = true
	} else {
		delete(c.unschedulable, key)
	}
}

// Run blocks until ctx is done.
func (c *Controller) Run(ctx context.Context, n int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.log.Info("starting scheduler", "schedulerName", c.opts.SchedulerName)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	workers.Run(ctx, c.queue, n, "pod", c.log, c.sync)
}
