package endpointslice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodenet/nodenet/controllers/internal/ctrlutil"
	"github.com/nodenet/nodenet/controllers/internal/workers"
)

// ControllerName is the value of the endpointslice.kubernetes.io/managed-by
// label on every slice this controller writes; slices without it are not
// ours and are left alone.
const ControllerName = "endpointslice-controller.nodenet.io"

// Limits of Options.MaxEndpointsPerSlice. 1000 is the API's own limit on
// endpoints in one slice.
const (
	DefaultMaxEndpointsPerSlice = 100
	MaxEndpointsPerSliceLimit   = 1000
)

// staleRetry is how soon a Service whose slice cache lags our writes is
// retried if no slice event wakes it first.
const staleRetry = time.Second

// Options configure the controller.
type Options struct {
	// MaxEndpointsPerSlice (--max-endpoints-per-slice) caps the endpoints of
	// one slice; larger services are split over several slices. 0 means
	// DefaultMaxEndpointsPerSlice.
	MaxEndpointsPerSlice int
}

func (o Options) withDefaults() Options {
	if o.MaxEndpointsPerSlice == 0 {
		o.MaxEndpointsPerSlice = DefaultMaxEndpointsPerSlice
	}
	return o
}

// Validate reports what is wrong with o (zero values meaning defaults); New
// refuses the same.
func (o Options) Validate() error {
	return o.withDefaults().validate()
}

func (o Options) validate() error {
	if n := o.MaxEndpointsPerSlice; n < 1 || n > MaxEndpointsPerSliceLimit {
		return fmt.Errorf("--max-endpoints-per-slice must be between 1 and %d, got %d", MaxEndpointsPerSliceLimit, n)
	}
	return nil
}

// Controller keeps the EndpointSlices of selector Services in step with
// their pods.
type Controller struct {
	client   kubernetes.Interface
	opts     Options
	recorder record.EventRecorder
	log      *slog.Logger

	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	slices   discoverylisters.EndpointSliceLister

	// The indexers behind the listers, for the lookups listers cannot do
	// (pods by label pair or node, services by selector pair, slices by
	// service).
	podIndex     cache.Indexer
	serviceIndex cache.Indexer
	sliceIndex   cache.Indexer

	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	tracker  *sliceTracker
	triggers *triggerTimes

	// running guards against two Runs sharing one queue.
	running sync.Mutex
}

// New builds the controller and registers its informer handlers on factory;
// the caller starts the factory afterwards. recorder may be nil.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, opts Options, recorder record.EventRecorder, log *slog.Logger) (*Controller, error) {
	if client == nil {
		return nil, errors.New("endpointslice controller: nil client")
	}
	if factory == nil {
		return nil, errors.New("endpointslice controller: nil informer factory")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	svcInf := factory.Core().V1().Services()
	podInf := factory.Core().V1().Pods()
	nodeInf := factory.Core().V1().Nodes()
	sliceInf := factory.Discovery().V1().EndpointSlices()

	c := &Controller{
		client:       client,
		opts:         opts,
		recorder:     ctrlutil.Recorder(recorder),
		log:          cmp.Or(log, slog.New(slog.DiscardHandler)).With("controller", "endpointslice"),
		services:     svcInf.Lister(),
		nodes:        nodeInf.Lister(),
		slices:       sliceInf.Lister(),
		podIndex:     podInf.Informer().GetIndexer(),
		serviceIndex: svcInf.Informer().GetIndexer(),
		sliceIndex:   sliceInf.Informer().GetIndexer(),
		queue:        ctrlutil.NewQueue("endpointslice"),
		triggers:     newTriggerTimes(),
	}
	c.tracker = newSliceTracker(func(ns, name string) *discoveryv1.EndpointSlice {
		s, err := c.slices.EndpointSlices(ns).Get(name)
		if err != nil {
			return nil
		}
		return s
	})

	for _, ix := range []struct {
		inf      cache.SharedIndexInformer
		indexers cache.Indexers
	}{
		{svcInf.Informer(), cache.Indexers{serviceBySelectorIndex: serviceSelectorPairs}},
		{podInf.Informer(), cache.Indexers{podByLabelIndex: podLabelPairs, podByNodeIndex: ctrlutil.PodNodeName}},
		{sliceInf.Informer(), cache.Indexers{sliceByServiceIndex: sliceService}},
	} {
		if err := ix.inf.AddIndexers(ix.indexers); err != nil {
			return nil, fmt.Errorf("add endpointslice controller indexers: %w", err)
		}
	}

	synced, err := ctrlutil.AddHandlers("endpointslice",
		ctrlutil.Handler{Informer: svcInf.Informer(), Handler: cache.ResourceEventHandlerFuncs{AddFunc: c.addService, UpdateFunc: c.updateService, DeleteFunc: c.deleteService}},
		ctrlutil.Handler{Informer: podInf.Informer(), Handler: cache.ResourceEventHandlerFuncs{AddFunc: c.addPod, UpdateFunc: c.updatePod, DeleteFunc: c.deletePod}},
		ctrlutil.Handler{Informer: nodeInf.Informer(), Handler: cache.ResourceEventHandlerFuncs{AddFunc: c.addNode, UpdateFunc: c.updateNode, DeleteFunc: c.deleteNode}},
		ctrlutil.Handler{Informer: sliceInf.Informer(), Handler: cache.ResourceEventHandlerFuncs{AddFunc: c.addSlice, UpdateFunc: c.updateSlice, DeleteFunc: c.deleteSlice}})
	if err != nil {
		return nil, err
	}
	c.synced = synced
	return c, nil
}

// Run waits for the caches, then syncs queued Services with workers
// goroutines until ctx is done. A controller runs once: Run shuts its queue
// down on return.
func (c *Controller) Run(ctx context.Context, n int) {
	defer utilruntime.HandleCrash()
	if !c.running.TryLock() {
		c.log.Error("Run called twice on one controller")
		return
	}
	defer c.running.Unlock()
	defer c.queue.ShutDown()
	n = max(n, 1)

	c.log.Info("starting", "workers", n, "maxEndpointsPerSlice", c.opts.MaxEndpointsPerSlice)
	defer c.log.Info("stopped")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}

	workers.Loop(ctx, c.queue, n, c.processNext)
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)

	err := c.sync(ctx, key)
	switch {
	case err == nil:
		c.queue.Forget(key)
	case errors.Is(err, errStaleCache):
		// Our own writes have not reached the informer yet; syncing now
		// would duplicate slices. Their events wake the key (see
		// sliceTracker.view); the delayed add is a safety net, not the
		// normal path, so it is not an exponential backoff.
		c.log.Debug("slice cache behind our writes, waiting", "service", key)
		c.queue.AddAfter(key, staleRetry)
	case ctx.Err() != nil:
		// Shutting down: the next start rebuilds everything from the API.
	default:
		c.log.Warn("sync failed, retrying", "service", key, "retries", c.queue.NumRequeues(key), "err", err)
		c.queue.AddRateLimited(key)
	}
	return true
}
