package endpointslice

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/controllers/internal/queueprobe"
	"github.com/nodenet/nodenet/internal/testapi"
)

// Timeouts are generous: CI runs these on two loaded cores.
const (
	waitLong  = 30 * time.Second
	testNS    = "default"
	testImage = "registry.example/app:1"
)

// running is one controller instance with its own informer factory.
type running struct {
	c    *Controller
	q    *queueprobe.Queue
	stop func()
}

// startController runs a controller against s until the test ends or stop
// is called.
func startController(t *testing.T, client kubernetes.Interface, opts Options) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(client, factory, opts, nil, testapi.Logger())
	if err != nil {
		cancel()
		t.Fatalf("new controller: %v", err)
	}
	// Before the informers start, so every handler call goes through it.
	q := queueprobe.Wrap(c.queue)
	c.queue = q
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 2)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(waitLong):
				t.Errorf("controller did not stop within %v", waitLong)
			}
			factory.Shutdown()
		})
	}
	t.Cleanup(stop)
	return &running{c: c, q: q, stop: stop}
}

func ctxT(t *testing.T) context.Context { return testapi.Context(t) }

func createService(t *testing.T, client kubernetes.Interface, svc *corev1.Service) *corev1.Service {
	t.Helper()
	if svc.Namespace == "" {
		svc.Namespace = testNS
	}
	out, err := client.CoreV1().Services(svc.Namespace).Create(ctxT(t), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", svc.Name, err)
	}
	return out
}

// selectorService is a ClusterIP Service selecting app=<app> with one port
// 80 → targetPort.
func selectorService(name, app string, target intstr.IntOrString) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: target, Protocol: corev1.ProtocolTCP}},
		},
	}
}

func createNode(t *testing.T, client kubernetes.Interface, name, zone string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if zone != "" {
		n.Labels = map[string]string{corev1.LabelTopologyZone: zone}
	}
	if _, err := client.CoreV1().Nodes().Create(ctxT(t), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
}

// podSpec describes a test pod: there is no kubelet, so tests write the
// status a kubelet would.
type podSpec struct {
	name   string
	app    string
	node   string
	ports  []corev1.ContainerPort
	ips    []string // status.podIPs; none = not started
	ready  bool
	labels map[string]string
}

func createPod(t *testing.T, client kubernetes.Interface, ps podSpec) *corev1.Pod {
	t.Helper()
	pod, err := tryCreatePod(ctxT(t), client, ps)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func tryCreatePod(ctx context.Context, client kubernetes.Interface, ps podSpec) (*corev1.Pod, error) {
	l := map[string]string{"app": ps.app}
	for k, v := range ps.labels {
		l[k] = v
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ps.name, Namespace: testNS, Labels: l},
		Spec: corev1.PodSpec{
			NodeName:   ps.node,
			Containers: []corev1.Container{{Name: "app", Image: testImage, Ports: ps.ports}},
		},
	}
	out, err := client.CoreV1().Pods(testNS).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", ps.name, err)
	}
	if len(ps.ips) == 0 {
		return out, nil
	}
	return setPodStatus(ctx, client, out, ps.ips, ps.ready)
}

// setPodStatus makes the pod Running with the given IPs and Ready condition.
func setPodStatus(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, ips []string, ready bool) (*corev1.Pod, error) {
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ips[0]
	pod.Status.PodIPs = nil
	for _, ip := range ips {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
	out, err := client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("update status of pod %s: %w", pod.Name, err)
	}
	return out, nil
}

// setReady flips a pod's Ready condition, keeping its IPs.
func setReady(t *testing.T, client kubernetes.Interface, name string, ready bool) {
	t.Helper()
	pod, err := client.CoreV1().Pods(testNS).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	var ips []string
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if _, err := setPodStatus(ctxT(t), client, pod, ips, ready); err != nil {
		t.Fatal(err)
	}
}

func deletePod(t *testing.T, client kubernetes.Interface, name string, grace *int64) {
	t.Helper()
	if err := client.CoreV1().Pods(testNS).Delete(ctxT(t), name, metav1.DeleteOptions{GracePeriodSeconds: grace}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
}

// createPods creates many ready pods with 8 concurrent writers.
func createPods(t *testing.T, client kubernetes.Interface, specs []podSpec) {
	t.Helper()
	ctx := ctxT(t)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan podSpec)
	)
	for range 8 {
		wg.Go(func() {
			for ps := range next {
				if _, err := tryCreatePod(ctx, client, ps); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, ps := range specs {
		next <- ps
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d pod creates failed, first: %v", len(errs), errs[0])
	}
}

// podIP returns a unique IPv4 address for test pod i.
func podIP(i int) string { return fmt.Sprintf("10.244.%d.%d", i/250, i%250+2) }

// managedSlices lists our slices of a Service straight from the API.
func listSlices(t *testing.T, client kubernetes.Interface, svc string) []discoveryv1.EndpointSlice {
	t.Helper()
	sel := labels.Set{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: ControllerName}.String()
	l, err := client.DiscoveryV1().EndpointSlices(testNS).List(ctxT(t), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatalf("list slices of %s: %v", svc, err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items
}

// endpointsByPod flattens slices into pod name → endpoint; a pod listed
// twice (in one family) is a bug and fails the test.
func endpointsByPod(t *testing.T, ss []discoveryv1.EndpointSlice) map[string]discoveryv1.Endpoint {
	t.Helper()
	out := map[string]discoveryv1.Endpoint{}
	seen := map[string]bool{}
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil {
				t.Fatalf("slice %s: endpoint %v without targetRef", s.Name, ep.Addresses)
			}
			k := string(s.AddressType) + "/" + ep.TargetRef.Name
			if seen[k] {
				t.Fatalf("pod %s listed twice in %s slices", ep.TargetRef.Name, s.AddressType)
			}
			seen[k] = true
			out[ep.TargetRef.Name] = ep
		}
	}
	return out
}

// waitSlices polls the API until cond holds for the Service's slices and
// returns them.
func waitSlices(t *testing.T, client kubernetes.Interface, svc, what string, cond func([]discoveryv1.EndpointSlice) bool) []discoveryv1.EndpointSlice {
	t.Helper()
	var last []discoveryv1.EndpointSlice
	deadline := time.Now().Add(waitLong)
	for {
		last = listSlices(t, client, svc)
		if cond(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; slices of %s:\n%s", waitLong, what, svc, dumpSlices(last))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dumpSlices(ss []discoveryv1.EndpointSlice) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "  %s rv=%s %s ports=%s:", s.Name, s.ResourceVersion, s.AddressType, portsKey(s.Ports))
		for _, ep := range s.Endpoints {
			name := "?"
			if ep.TargetRef != nil {
				name = ep.TargetRef.Name
			}
			fmt.Fprintf(&b, " %s%v(r=%v,s=%v,t=%v)", name, ep.Addresses, deref(ep.Conditions.Ready), deref(ep.Conditions.Serving), deref(ep.Conditions.Terminating))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func resourceVersions(ss []discoveryv1.EndpointSlice) map[string]string {
	out := map[string]string{}
	for _, s := range ss {
		out[s.Name] = s.ResourceVersion
	}
	return out
}

// changedSlices returns the names whose resourceVersion differs (or that
// appeared or vanished) between two snapshots.
func changedSlices(before, after map[string]string) []string {
	var out []string
	for n, rv := range before {
		if after[n] != rv {
			out = append(out, n)
		}
	}
	for n := range after {
		if _, ok := before[n]; !ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func totalEndpoints(ss []discoveryv1.EndpointSlice) int {
	n := 0
	for _, s := range ss {
		n += len(s.Endpoints)
	}
	return n
}

func ptr[T any](v T) *T { return &v }
