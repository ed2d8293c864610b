package daemonset

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodenet/nodenet/controllers/internal/ctrlutil"
	"github.com/nodenet/nodenet/controllers/internal/workers"
)

// controllerKind is what the controller's owner references name.
var controllerKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// byOwner indexes pods and ControllerRevisions by the namespace/name of the
// DaemonSet their controller reference names, whether or not it still
// exists. The name is qualified so it cannot clash with another
// controller's index on the shared informers.
const byOwner = "daemonset.nodenet.io/owner"

// Controller runs the pods of DaemonSets.
type Controller struct {
	client   kubernetes.Interface
	opts     Options
	sets     appslisters.DaemonSetLister
	nodes    corelisters.NodeLister
	pods     corelisters.PodLister
	podIndex cache.Indexer
	revIndex cache.Indexer
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
	log      *slog.Logger
	now      func() time.Time

	writes  *tracker
	backoff *flowcontrol.Backoff // failed pods, per daemonset key + node
}

// New builds the controller and registers its informer handlers; the caller
// starts factory afterwards.
func New(client kubernetes.Interface, factory informers.SharedInformerFactory, opts Options, recorder record.EventRecorder, log *slog.Logger) (*Controller, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	dsInf := factory.Apps().V1().DaemonSets()
	revInf := factory.Apps().V1().ControllerRevisions()
	podInf := factory.Core().V1().Pods()
	nodeInf := factory.Core().V1().Nodes()
	c := &Controller{
		client:   client,
		opts:     opts,
		sets:     dsInf.Lister(),
		nodes:    nodeInf.Lister(),
		pods:     podInf.Lister(),
		podIndex: podInf.Informer().GetIndexer(),
		revIndex: revInf.Informer().GetIndexer(),
		queue:    ctrlutil.NewQueue("daemonset"),
		recorder: ctrlutil.Recorder(recorder),
		log:      cmp.Or(log, slog.Default()),
		now:      time.Now,
		writes:   newTracker(time.Now),
		backoff:  flowcontrol.NewBackOff(opts.FailedPodBackoff, opts.MaxFailedPodBackoff),
	}
	for _, inf := range []cache.SharedIndexInformer{podInf.Informer(), revInf.Informer()} {
		if err := inf.AddIndexers(cache.Indexers{byOwner: ownerKey}); err != nil {
			return nil, fmt.Errorf("add daemonset owner index: %w", err)
		}
	}
	c.synced, err = ctrlutil.AddHandlers("daemonset",
		ctrlutil.Handler{Informer: dsInf.Informer(), Handler: ctrlutil.OnChange(c.enqueue)},
		ctrlutil.Handler{Informer: podInf.Informer(), Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.onPod,
			UpdateFunc: c.onPodUpdate,
			DeleteFunc: c.onPod,
		}},
		ctrlutil.Handler{Informer: nodeInf.Informer(), Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.enqueueAll() },
			UpdateFunc: c.onNodeUpdate,
			DeleteFunc: func(any) { c.enqueueAll() },
		}},
		ctrlutil.Handler{Informer: revInf.Informer(), Handler: cache.ResourceEventHandlerFuncs{
			// A revision deleted by hand is made again; updates are ours.
			AddFunc:    c.enqueueOwner,
			DeleteFunc: c.enqueueOwner,
		}},
	)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ownerKey is the byOwner index function.
func ownerKey(obj any) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, nil
	}
	ref := metav1.GetControllerOfNoCopy(m)
	if ref == nil || ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return nil, nil
	}
	return []string{m.GetNamespace() + "/" + ref.Name}, nil
}

func metaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not an object", obj)
	}
	return m, nil
}

func (c *Controller) enqueue(obj any) { ctrlutil.Enqueue(c.queue, obj) }

// enqueueOwner queues the DaemonSet an object's controller reference names.
func (c *Controller) enqueueOwner(obj any) {
	keys, _ := ownerKey(obj)
	for _, k := range keys {
		c.queue.Add(k)
	}
}

func (c *Controller) enqueueAll() {
	sets, err := c.sets.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, ds := range sets {
		c.enqueue(ds)
	}
}

// onPod queues the pod's DaemonSet; a pod without a controller is queued
// for every DaemonSet that might adopt it.
func (c *Controller) onPod(obj any) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		c.enqueueOwner(obj)
		return
	}
	if m.GetDeletionTimestamp() != nil {
		return
	}
	sets, err := c.sets.DaemonSets(m.GetNamespace()).List(labels.Everything())
	if err != nil {
		return
	}
	for _, ds := range sets {
		if sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector); err == nil && sel.Matches(labels.Set(m.GetLabels())) {
			c.enqueue(ds)
		}
	}
}

// onPodUpdate queues both owners when the controller reference changed
// (adoption, release), and the would-be adopters when the labels did.
func (c *Controller) onPodUpdate(old, cur any) {
	o, ok1 := old.(*corev1.Pod)
	p, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || o.ResourceVersion == p.ResourceVersion {
		return // a resync: nothing happened
	}
	if !apiequality.Semantic.DeepEqual(metav1.GetControllerOfNoCopy(o), metav1.GetControllerOfNoCopy(p)) ||
		!apiequality.Semantic.DeepEqual(o.Labels, p.Labels) {
		c.onPod(o)
	}
	c.onPod(p)
}

// onNodeUpdate queues every DaemonSet when something placement reads
// changed; heartbeats and status updates are ignored.
func (c *Controller) onNodeUpdate(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	if apiequality.Semantic.DeepEqual(o.Labels, n.Labels) && apiequality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) {
		return
	}
	c.enqueueAll()
}

// Run blocks until ctx is done.
func (c *Controller) Run(ctx context.Context, n int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.log.Info("starting daemonset controller", "burstReplicas", c.opts.BurstReplicas)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	// Forget the back-off of nodes whose pods stopped failing.
	go wait.UntilWithContext(ctx, func(context.Context) { c.backoff.GC() }, time.Minute)
	workers.Run(ctx, c.queue, n, "daemonset", c.log, c.sync)
}
