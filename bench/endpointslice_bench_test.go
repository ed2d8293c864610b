package bench

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodenet/nodenet/controllers/endpointslice"
	"github.com/nodenet/nodenet/internal/testapi"
)

var (
	flagEPSServices = flag.Int("nodenet.eps.services", 1000, "Services in the EndpointSlice benchmark")
	flagEPSPods     = flag.Int("nodenet.eps.pods", 20, "pods per Service in the EndpointSlice benchmark")
	flagEPSFlips    = flag.Int("nodenet.eps.flips", 200, "not-ready → ready flips timed in the EndpointSlice benchmark")
	flagEPSWorkers  = flag.Int("nodenet.eps.workers", 5, "EndpointSlice controller workers (upstream's --concurrent-service-endpoint-syncs default)")
)

const (
	epsNamespace = "bench-eps"
	epsNodes     = 10
)

// epsResult is one run of the EndpointSlice scenario.
type epsResult struct {
	Services, Pods int
	Create         time.Duration // first write to last pod status written
	AllSlices      time.Duration // first write to every Service seen with all pods ready
	SliceWrites    int64         // creates+updates+deletes of slices by the controller
	Slices         int           // slices at the end of the create phase
	Flip           Latency       // status update returned → slice seen ready
}

func (r epsResult) String() string {
	return fmt.Sprintf("%d services × %d pods: written in %v, all slices complete %v after the first write; "+
		"controller slice writes %d for %d slices; flip to ready → slice: %v",
		r.Services, r.Pods/max(r.Services, 1), r.Create.Round(time.Millisecond), r.AllSlices.Round(time.Millisecond),
		r.SliceWrites, r.Slices, r.Flip)
}

// BenchmarkEndpointSlice: an in-process API server and the EndpointSlice
// controller; -nodenet.eps.services Services of -nodenet.eps.pods pods
// each, pods created Ready with IPs by -nodenet.workers concurrent clients.
// Measures the wall time from the first write until a watcher has seen
// every Service's slices complete, the controller's slice writes, then the
// latency of -nodenet.eps.flips single pods turned ready (one at a time,
// each on a different Service) from the status update returning to a slice
// watcher seeing the endpoint ready. Run with -benchtime=1x.
func BenchmarkEndpointSlice(b *testing.B) {
	sc := scaleFor(b)
	svcs := sc.scaled("nodenet.eps.services", *flagEPSServices)
	flips := min(sc.scaled("nodenet.eps.flips", *flagEPSFlips), svcs)
	b.Logf("services=%d pods/service=%d flips=%d create-workers=%d controller-workers=%d (scale %g)",
		svcs, *flagEPSPods, flips, sc.Workers, *flagEPSWorkers, sc.Factor)
	var res epsResult
	// A classic b.N loop: the scenario stops and starts the timer itself,
	// which b.Loop does not allow.
	for i := 0; i < b.N; i++ {
		res = runEndpointSlice(b, svcs, *flagEPSPods, flips, sc.Workers, *flagEPSWorkers)
	}
	b.Logf("%v", res)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(res.AllSlices.Seconds(), "all-slices-s")
	b.ReportMetric(res.Create.Seconds(), "create-s")
	b.ReportMetric(float64(res.Pods)/res.AllSlices.Seconds(), "pods/s")
	b.ReportMetric(float64(res.SliceWrites), "slice-writes")
	b.ReportMetric(float64(res.Slices), "slices")
	b.ReportMetric(Ms(res.Flip.P50), "flip-p50-ms")
	b.ReportMetric(Ms(res.Flip.P99), "flip-p99-ms")
	b.ReportMetric(Ms(res.Flip.Max), "flip-max-ms")
}

func epsServiceName(i int) string { return fmt.Sprintf("eps-%04d", i) }
func epsPodName(i, j int) string  { return fmt.Sprintf("eps-%04d-%02d", i, j) }
func epsPodIP(i, j, per int) string {
	n := i*per + j + 1
	return fmt.Sprintf("10.%d.%d.%d", 64+n/65536, (n/256)%256, n%256)
}

// sliceWatcher follows slices through an informer: per Service the ready
// pods, and per armed pod the moment it is first seen ready.
type sliceWatcher struct {
	mu       sync.Mutex
	perPod   int
	complete int                       // Services with all pods ready
	count    map[string]map[string]int // service → slice name → ready endpoints
	total    map[string]int            // service → ready endpoints over its slices
	armed    map[string]chan time.Time // pod → receives the time it is seen ready
	allDone  chan time.Time
	services int
}

func newSliceWatcher(services, perPod int) *sliceWatcher {
	return &sliceWatcher{
		perPod: perPod, services: services,
		count: map[string]map[string]int{}, total: map[string]int{},
		armed: map[string]chan time.Time{}, allDone: make(chan time.Time, 1),
	}
}

func (w *sliceWatcher) arm(pod string) chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	w.armed[pod] = ch
	w.mu.Unlock()
	return ch
}

func (w *sliceWatcher) observe(s *discoveryv1.EndpointSlice, deleted bool) {
	now := time.Now()
	svc := s.Labels[discoveryv1.LabelServiceName]
	n := 0
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ep := range s.Endpoints {
		if ep.Conditions.Ready == nil || !*ep.Conditions.Ready || deleted {
			continue
		}
		n++
		if ep.TargetRef != nil {
			if ch, ok := w.armed[ep.TargetRef.Name]; ok {
				ch <- now
				delete(w.armed, ep.TargetRef.Name)
			}
		}
	}
	m := w.count[svc]
	if m == nil {
		m = map[string]int{}
		w.count[svc] = m
	}
	wasComplete := w.total[svc] == w.perPod
	w.total[svc] += n - m[s.Name]
	m[s.Name] = n
	isComplete := w.total[svc] == w.perPod
	switch {
	case isComplete && !wasComplete:
		w.complete++
		if w.complete == w.services {
			w.allDone <- now
		}
	case wasComplete && !isComplete:
		w.complete--
	}
}

func runEndpointSlice(b *testing.B, services, perPod, flips, createWorkers, controllerWorkers int) epsResult {
	b.StopTimer()
	srv := testapi.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := EnsureNamespace(ctx, srv.Client, epsNamespace); err != nil {
		b.Fatal(err)
	}
	for k := range epsNodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("eps-node-%02d", k),
			Labels: map[string]string{corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", k%3)},
		}}
		if _, err := srv.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			b.Fatalf("create node: %v", err)
		}
	}

	// The controller, with a client that counts its slice writes.
	var writes atomic.Int64
	ctrlClient := kubernetes.NewForConfigOrDie(observedConfig(srv.Config, func(req *http.Request) {
		if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/endpointslices") {
			writes.Add(1)
		}
	}))
	ctrlFactory := informers.NewSharedInformerFactory(ctrlClient, 0)
	ctrl, err := endpointslice.New(ctrlClient, ctrlFactory, endpointslice.Options{}, nil, testapi.Logger())
	if err != nil {
		b.Fatal(err)
	}
	defer runController(ctx, ctrlFactory, func(ctx context.Context) { ctrl.Run(ctx, controllerWorkers) })()

	// The watcher: its own client and informer, like a node's proxy.
	w := newSliceWatcher(services, perPod)
	watchFactory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(srv.Config), 0, informers.WithNamespace(epsNamespace))
	if _, err := watchFactory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj.(*discoveryv1.EndpointSlice), false) },
		UpdateFunc: func(_, obj any) { w.observe(obj.(*discoveryv1.EndpointSlice), false) },
		DeleteFunc: func(obj any) {
			if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
				w.observe(s, true)
			} else if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				w.observe(t.Obj.(*discoveryv1.EndpointSlice), true)
			}
		},
	}); err != nil {
		b.Fatal(err)
	}
	defer startInformers(ctx, watchFactory)()

	b.StartTimer()
	start := time.Now()
	if _, err := parallel(ctx, services, createWorkers, func(ctx context.Context, i int) error {
		return createEPSService(ctx, srv.Client, i)
	}); err != nil {
		b.Fatal(err)
	}
	if _, err := parallel(ctx, services*perPod, createWorkers, func(ctx context.Context, n int) error {
		_, err := createEPSPod(ctx, srv.Client, n/perPod, n%perPod, perPod, true)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	created := time.Since(start)
	var end time.Time
	select {
	case end = <-w.allDone:
	case <-ctx.Done():
		w.mu.Lock()
		b.Fatalf("%d of %d services complete before the timeout", w.complete, services)
	}
	b.StopTimer()
	res := epsResult{Services: services, Pods: services * perPod, Create: created, AllSlices: end.Sub(start)}
	res.SliceWrites = writes.Load()
	res.Slices = len(watchFactory.Discovery().V1().EndpointSlices().Informer().GetStore().ListKeys())

	res.Flip = flipToReady(b, ctx, srv.Client, w, services, perPod, flips)
	return res
}

// flipToReady turns one pod of each of flips Services not ready (untimed,
// all at once), waits for that to show, then turns them ready one at a
// time, timing each from the status update returning to the watcher
// seeing the endpoint ready.
func flipToReady(b *testing.B, ctx context.Context, client kubernetes.Interface, w *sliceWatcher, services, perPod, flips int) Latency {
	pods := make([]*corev1.Pod, flips)
	stride := max(1, services/flips)
	if _, err := parallel(ctx, flips, 16, func(ctx context.Context, k int) error {
		i, j := (k*stride)%services, k%perPod
		p, err := client.CoreV1().Pods(epsNamespace).Get(ctx, epsPodName(i, j), metav1.GetOptions{})
		if err != nil {
			return err
		}
		pods[k], err = setEPSReady(ctx, client, p, false)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		w.mu.Lock()
		done := w.complete == services-flips
		w.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("not-ready pods never showed in the slices")
		}
		time.Sleep(10 * time.Millisecond)
	}

	lat := make([]time.Duration, 0, flips)
	for _, p := range pods {
		seen := w.arm(p.Name)
		if _, err := setEPSReady(ctx, client, p, true); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		select {
		case at := <-seen:
			lat = append(lat, max(0, at.Sub(returned)))
		case <-time.After(time.Minute):
			b.Fatalf("pod %s never seen ready", p.Name)
		}
	}
	return Summarize(lat)
}

func createEPSService(ctx context.Context, client kubernetes.Interface, i int) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: epsServiceName(i), Namespace: epsNamespace},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": epsServiceName(i)},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: 9100, TargetPort: intstr.FromInt32(9100), Protocol: corev1.ProtocolTCP},
			},
		},
	}
	if _, err := client.CoreV1().Services(epsNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s: %w", svc.Name, err)
	}
	return nil
}

// createEPSPod creates pod j of Service i and writes the status a kubelet
// would: Running, an IP, Ready.
func createEPSPod(ctx context.Context, client kubernetes.Interface, i, j, perPod int, ready bool) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: epsPodName(i, j), Namespace: epsNamespace, Labels: map[string]string{"app": epsServiceName(i)}},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("eps-node-%02d", (i+j)%epsNodes),
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
		},
	}
	out, err := client.CoreV1().Pods(epsNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	ip := epsPodIP(i, j, perPod)
	out.Status.Phase = corev1.PodRunning
	out.Status.PodIP = ip
	out.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	return setEPSReady(ctx, client, out, ready)
}

func setEPSReady(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, ready bool) (*corev1.Pod, error) {
	pod = pod.DeepCopy()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
	out, err := client.CoreV1().Pods(epsNamespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update status of pod %s: %w", pod.Name, err)
	}
	return out, nil
}
