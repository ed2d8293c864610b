package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Label selectors kube-proxy uses: services claimed by another proxy
// (service.kubernetes.io/service-proxy-name) and headless services are not
// ours.
const (
	serviceSelector = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless"
	sliceSelector   = "!service.kubernetes.io/service-proxy-name"
)

// Run starts informers on Services, EndpointSlices and this Node, waits for
// their caches, then runs the sync loop until ctx ends. The data plane is
// left in place on return.
func (p *Proxy) Run(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resync := 0 * time.Second // handlers are idempotent; the sync loop resyncs the kernel
	strip := informers.WithTransform(StripUnused)
	svcInf := informers.NewSharedInformerFactoryWithOptions(client, resync, strip,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = serviceSelector }))
	sliceInf := informers.NewSharedInformerFactoryWithOptions(client, resync, strip,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sliceSelector }))
	nodeInf := informers.NewSharedInformerFactoryWithOptions(client, resync, strip,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.cfg.NodeName).String()
		}))
	t := p.tracker
	// The first sync must see every Service and EndpointSlice: an
	// informer's cache is synced before its handlers have been given the
	// initial list, so what is waited for below is each handler's
	// registration (a first sync from a partial snapshot would drop the
	// missing Services' rules — and, after a mode switch, with the old
	// mode's rules already gone).
	var regs []cache.ResourceEventHandlerRegistration
	svcReg, err := svcInf.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { setService(t, o) },
		UpdateFunc: func(_, o any) { setService(t, o) },
		DeleteFunc: func(o any) {
			if svc, ok := unwrap(o).(*v1.Service); ok {
				t.DeleteService(svc.Namespace, svc.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("add service handler: %w", err)
	}
	regs = append(regs, svcReg)
	sliceReg, err := sliceInf.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { setSlice(t, o) },
		UpdateFunc: func(_, o any) { setSlice(t, o) },
		DeleteFunc: func(o any) {
			if sl, ok := unwrap(o).(*discovery.EndpointSlice); ok {
				t.DeleteEndpointSlice(sl)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("add endpointslice handler: %w", err)
	}
	regs = append(regs, sliceReg)
	if p.cfg.NodeName != "" {
		nodeReg, err := nodeInf.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { setNode(t, o) },
			UpdateFunc: func(_, o any) { setNode(t, o) },
			DeleteFunc: func(any) { t.SetNode(nil) },
		})
		if err != nil {
			return fmt.Errorf("add node handler: %w", err)
		}
		regs = append(regs, nodeReg)
	}
	for _, fac := range []informers.SharedInformerFactory{svcInf, sliceInf, nodeInf} {
		fac.Start(ctx.Done())
	}
	// The data planes' start-up work overlaps the initial lists; Run
	// returns only after it (the defers run last to first).
	prepared := make(chan struct{})
	go func() {
		defer close(prepared)
		p.prepare(ctx)
	}()
	defer func() { <-prepared }()
	defer func() {
		cancel()
		for _, fac := range []informers.SharedInformerFactory{svcInf, sliceInf, nodeInf} {
			fac.Shutdown()
		}
	}()
	for _, fac := range []informers.SharedInformerFactory{svcInf, sliceInf, nodeInf} {
		for typ, ok := range fac.WaitForCacheSync(ctx.Done()) {
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("wait for %v cache: %w", typ, errors.New("not synced"))
			}
		}
	}
	synced := make([]cache.InformerSynced, len(regs))
	for i, r := range regs {
		synced[i] = r.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("wait for the informers' handlers: not synced")
	}
	p.log.Info("caches synced; syncing data plane", "node", p.cfg.NodeName)
	p.RunLoop(ctx)
	return nil
}

// StripUnused is the informers' transform: it drops, before an object is
// cached, the fields the proxy never reads: managed fields and owner
// references everywhere, a Service's labels, selector, conditions and
// annotations (but the scheduler's), an EndpointSlice's endpoint target
// references and host names and its labels and annotations (but the
// service name and trigger time), a Node's image list; and it compacts
// what is left of Services and EndpointSlices (compact.go). With
// 10,000 Services that is a fifth of the proxy's live heap, and the cache
// is the proxy's alone. Objects of other types pass unchanged.
func StripUnused(o any) (any, error) {
	switch obj := o.(type) {
	case *v1.Service:
		obj.ManagedFields = nil
		obj.OwnerReferences = nil
		obj.Labels = nil // the label selectors were applied by the server
		obj.Spec.Selector = nil
		obj.Status.Conditions = nil
		obj.Annotations = keepKeys(obj.Annotations, SchedulerAnnotation)
		compactService(obj)
	case *discovery.EndpointSlice:
		obj.ManagedFields = nil
		obj.OwnerReferences = nil
		obj.GenerateName = ""
		obj.Labels = keepKeys(obj.Labels, ServiceNameLabel)
		obj.Annotations = keepKeys(obj.Annotations, TriggerTimeAnnotation)
		for i := range obj.Endpoints {
			obj.Endpoints[i].TargetRef = nil
			obj.Endpoints[i].DeprecatedTopology = nil
			obj.Endpoints[i].Hostname = nil
		}
		compactSlice(obj)
	case *v1.Node:
		obj.ManagedFields = nil
		obj.Status.Images = nil
	}
	return o, nil
}

// keepKeys deletes every key of m but key, in place (a new map per object
// would be more garbage at start-up than the keys it drops), and returns
// nil when nothing is left.
func keepKeys(m map[string]string, key string) map[string]string {
	for k := range m {
		if k != key {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func unwrap(o any) any {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return o
}

func setService(t *Tracker, o any) {
	if svc, ok := o.(*v1.Service); ok {
		t.SetService(svc)
	}
}

func setSlice(t *Tracker, o any) {
	if sl, ok := o.(*discovery.EndpointSlice); ok {
		t.SetEndpointSlice(sl)
	}
}

func setNode(t *Tracker, o any) {
	if n, ok := o.(*v1.Node); ok {
		t.SetNode(n)
	}
}

// prepare runs each data plane's start-up work (Preparer) while the
// informers list; the first sync waits for it through the data plane.
func (p *Proxy) prepare(ctx context.Context) {
	for _, f := range p.fams {
		pr, ok := p.planes[f].(Preparer)
		if !ok {
			continue
		}
		start := time.Now()
		if err := pr.Prepare(ctx); err != nil {
			p.log.Warn("preparing the data plane failed; the first sync retries", "family", f, "err", err)
			continue
		}
		p.log.Info("data plane prepared", "family", f, "took", time.Since(start))
	}
}
