package loadbalancer

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
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

// Event reasons, for users who filter events.
const (
	ReasonNoIPAvailable              = "NoIPAvailable"
	ReasonLoadBalancerIPNotAvailable = "LoadBalancerIPNotAvailable"
	ReasonIPAlreadyAllocated         = "IPAlreadyAllocated"
	ReasonIPAllocated                = "IPAllocated"
)

// Controller assigns load-balancer IPs to Services.
type Controller struct {
	client   kubernetes.Interface
	services corelisters.ServiceLister
	synced   cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *slog.Logger
	alloc    *allocator

	// waiting holds Services left without an address they want; a release
	// wakes them, since that is the only thing that can help them.
	waitMu  sync.Mutex
	waiting map[string]bool
}

// New builds the controller and registers its informer handlers; the caller
// starts factory afterwards.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, opts Options, recorder record.EventRecorder, log *slog.Logger) (*Controller, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	inf := factory.Core().V1().Services()
	c := &Controller{
		client:   client,
		services: inf.Lister(),
		synced:   inf.Informer().HasSynced,
		queue:    ctrlutil.NewQueue("loadbalancer"),
		recorder: ctrlutil.Recorder(recorder),
		log:      cmp.Or(log, slog.Default()),
		alloc:    newAllocator(opts.Pools),
		waiting:  map[string]bool{},
	}
	if _, err := inf.Informer().AddEventHandler(ctrlutil.OnChange(c.enqueue)); err != nil {
		return nil, fmt.Errorf("register service handler: %w", err)
	}
	return c, nil
}

func (c *Controller) enqueue(obj any) { ctrlutil.Enqueue(c.queue, obj) }

// Run blocks until ctx is done. The table is rebuilt from every Service's
// status before the first worker starts, so no allocation can hand out an
// address that a not-yet-synced Service already publishes.
func (c *Controller) Run(ctx context.Context, n int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.log.Info("starting load-balancer IP controller", "pools", fmt.Sprint(c.alloc.pools))
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return
	}
	if err := c.rebuild(); err != nil {
		c.log.Error("rebuild allocation table", "err", err)
		return
	}
	workers.Run(ctx, c.queue, n, "service", c.log, c.sync)
}

// setWaiting records whether key still lacks an address it wants.
func (c *Controller) setWaiting(key string, waiting bool) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	if waiting {
		c.waiting[key] = true
	} else {
		delete(c.waiting, key)
	}
}

// wakeWaiting requeues every waiting Service after an address was freed.
func (c *Controller) wakeWaiting() {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	for key := range c.waiting {
		c.queue.Add(key)
	}
}

// ingressAddrs returns the IPs a Service publishes in its status.
func ingressAddrs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// managed reports whether this controller owns the Service's status.
func managed(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil
}
