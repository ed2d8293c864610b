package endpoints

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
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

// Names upstream gives the controller and its label, so tools that look
// for Endpoints managed by "the" endpoints controller find these.
const (
	LabelManagedBy = "endpoints.kubernetes.io/managed-by"
	ControllerName = "endpoint-controller"
)

// sliceByServiceIndex indexes EndpointSlices by "namespace/service".
const sliceByServiceIndex = "nodenet.io/endpoints-slice-service"

// Controller keeps Endpoints in step with EndpointSlices.
type Controller struct {
	client    kubernetes.Interface
	services  corelisters.ServiceLister
	endpoints corelisters.EndpointsLister
	slices    discoverylisters.EndpointSliceLister
	sliceIdx  cache.Indexer
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder
	log       *slog.Logger
}

// New builds the controller and registers its informer handlers on factory;
// the caller starts the factory afterwards. recorder may be nil.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, recorder record.EventRecorder, log *slog.Logger) (*Controller, error) {
	if client == nil || factory == nil {
		return nil, errors.New("endpoints controller: nil client or informer factory")
	}
	svcInf := factory.Core().V1().Services()
	epInf := factory.Core().V1().Endpoints()
	sliceInf := factory.Discovery().V1().EndpointSlices()
	c := &Controller{
		client:    client,
		services:  svcInf.Lister(),
		endpoints: epInf.Lister(),
		slices:    sliceInf.Lister(),
		sliceIdx:  sliceInf.Informer().GetIndexer(),
		queue:     ctrlutil.NewQueue("endpoints"),
		recorder:  ctrlutil.Recorder(recorder),
		log:       cmp.Or(log, slog.New(slog.DiscardHandler)).With("controller", "endpoints"),
	}
	if err := sliceInf.Informer().AddIndexers(cache.Indexers{sliceByServiceIndex: sliceService}); err != nil {
		return nil, fmt.Errorf("add endpoints controller indexer: %w", err)
	}
	byName := ctrlutil.OnChange(c.enqueue)
	bySlice := cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueSlice,
		UpdateFunc: func(old, obj any) {
			c.enqueueSlice(old) // the service-name label may have changed
			c.enqueueSlice(obj)
		},
		DeleteFunc: c.enqueueSlice,
	}
	// Endpoints events wake their Service too, so an Endpoints edited by
	// hand, or left behind by a Service deleted while we were down, is put
	// right.
	synced, err := ctrlutil.AddHandlers("endpoints",
		ctrlutil.Handler{Informer: svcInf.Informer(), Handler: byName},
		ctrlutil.Handler{Informer: epInf.Informer(), Handler: byName},
		ctrlutil.Handler{Informer: sliceInf.Informer(), Handler: bySlice})
	if err != nil {
		return nil, err
	}
	c.synced = synced
	return c, nil
}

// Run waits for the caches, then syncs queued Services until ctx ends.
func (c *Controller) Run(ctx context.Context, workerCount int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.log.Info("starting", "workers", workerCount)
	defer c.log.Info("stopped")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	workers.Run(ctx, c.queue, workerCount, "service", c.log, c.sync)
}

func (c *Controller) enqueue(obj any) { ctrlutil.Enqueue(c.queue, obj) }

func (c *Controller) enqueueSlice(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	keys, _ := sliceService(obj)
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// sliceService is the index function: a slice belongs to the Service its
// kubernetes.io/service-name label names.
func sliceService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + name}, nil
}

// serviceSlices returns the slices of the Service key.
func (c *Controller) serviceSlices(key string) ([]*discoveryv1.EndpointSlice, error) {
	objs, err := c.sliceIdx.ByIndex(sliceByServiceIndex, key)
	if err != nil {
		return nil, fmt.Errorf("look up endpointslices of %s: %w", key, err)
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*discoveryv1.EndpointSlice))
	}
	return out, nil
}

// managed: a Service with a selector gets its Endpoints from this
// controller; ExternalName Services have none.
func managed(svc *corev1.Service) bool {
	return len(svc.Spec.Selector) > 0 && svc.Spec.Type != corev1.ServiceTypeExternalName
}
