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
	svcInf := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = serviceSelector }))
	sliceInf := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sliceSelector }))
	nodeInf := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.cfg.NodeName).String()
		}))
	t := p.tracker
	// The first sync is a full one and removes what it does not see, so it
	// waits until the handlers (not just the caches) have seen every
	// object: otherwise a restart briefly drops the services whose events
	// were still queued.
	var handlers []cache.InformerSynced
	reg, err := svcInf.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
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
	handlers = append(handlers, reg.HasSynced)
	reg, err = sliceInf.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
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
	handlers = append(handlers, reg.HasSynced)
	if p.cfg.NodeName != "" {
		reg, err := nodeInf.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { setNode(t, o) },
			UpdateFunc: func(_, o any) { setNode(t, o) },
			DeleteFunc: func(any) { t.SetNode(nil) },
		})
		if err != nil {
			return fmt.Errorf("add node handler: %w", err)
		}
		handlers = append(handlers, reg.HasSynced)
	}
	for _, fac := range []informers.SharedInformerFactory{svcInf, sliceInf, nodeInf} {
		fac.Start(ctx.Done())
	}
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
	if !cache.WaitForCacheSync(ctx.Done(), handlers...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("wait for event handlers: not synced")
	}
	p.log.Info("caches synced; syncing data plane", "node", p.cfg.NodeName)
	p.RunLoop(ctx)
	return nil
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
