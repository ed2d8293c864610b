package loadbalancer

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/testapi"
)

const timeout = 20 * time.Second

// startController runs a controller until the returned stop is called (or
// the test ends). Events go to the API server, as in production.
func startController(t *testing.T, client kubernetes.Interface, pools ...string) (stop func()) {
	t.Helper()
	return testapi.RunController(t, client, "nodenet-loadbalancer", 2, func(f informers.SharedInformerFactory, r record.EventRecorder) (testapi.Runner, error) {
		return New(client, f, Options{Pools: cidrlist.MustParse(pools...)}, r, testapi.Logger())
	})
}

type svcOpt func(*corev1.Service)

func requestIP(ip string) svcOpt {
	return func(s *corev1.Service) { s.Spec.LoadBalancerIP = ip }
}

func dualStack(s *corev1.Service) {
	p := corev1.IPFamilyPolicyRequireDualStack
	s.Spec.IPFamilyPolicy = &p
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
}

func ipv6Only(s *corev1.Service) {
	p := corev1.IPFamilyPolicySingleStack
	s.Spec.IPFamilyPolicy = &p
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
}

func createLB(t *testing.T, client kubernetes.Interface, name string, opts ...svcOpt) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Port: 80}},
		},
	}
	for _, o := range opts {
		o(svc)
	}
	out, err := client.CoreV1().Services("default").Create(testapi.Context(t), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", name, err)
	}
	return out
}

func getSvc(t *testing.T, client kubernetes.Interface, name string) *corev1.Service {
	t.Helper()
	svc, err := client.CoreV1().Services("default").Get(testapi.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service %s: %v", name, err)
	}
	return svc
}

// ingressIPs returns the published IPs, failing on an entry without ipMode
// VIP (the node proxies rely on it).
func ingressIPs(t *testing.T, svc *corev1.Service) []string {
	t.Helper()
	var ips []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IPMode == nil || *ing.IPMode != corev1.LoadBalancerIPModeVIP {
			t.Errorf("service %s ingress %s: ipMode %v, want VIP", svc.Name, ing.IP, ing.IPMode)
		}
		ips = append(ips, ing.IP)
	}
	return ips
}

// waitIPs waits until the service publishes exactly n IPs and returns them.
func waitIPs(t *testing.T, client kubernetes.Interface, name string, n int) []string {
	t.Helper()
	var ips []string
	testapi.Eventually(t, timeout, name+" to get load-balancer IPs", func() bool {
		ips = ingressIPs(t, getSvc(t, client, name))
		return len(ips) == n
	})
	return ips
}

// waitEvent waits for a Warning event with reason about the service.
func waitEvent(t *testing.T, client kubernetes.Interface, name, reason string) *corev1.Event {
	t.Helper()
	var ev *corev1.Event
	sel := fields.Set{"involvedObject.name": name, "involvedObject.kind": "Service", "reason": reason}.AsSelector().String()
	testapi.Eventually(t, timeout, "event "+reason+" for "+name, func() bool {
		list, err := client.CoreV1().Events("default").List(testapi.Context(t), metav1.ListOptions{FieldSelector: sel})
		if err != nil || len(list.Items) == 0 {
			return false
		}
		ev = &list.Items[0]
		return true
	})
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event %s for %s has type %s, want Warning", reason, name, ev.Type)
	}
	return ev
}

// stillNoIPs asserts the service publishes nothing for a while.
func stillNoIPs(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if ips := ingressIPs(t, getSvc(t, client, name)); len(ips) > 0 {
			t.Fatalf("service %s got %v, want no IP", name, ips)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func inPrefix(t *testing.T, ip, cidr string) bool {
	t.Helper()
	return netip.MustParsePrefix(cidr).Contains(netip.MustParseAddr(ip))
}

// assertUnique fails when two services publish one IP.
func assertUnique(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	list, err := client.CoreV1().Services("default").List(testapi.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	seen := map[string]string{}
	for _, s := range list.Items {
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if other, dup := seen[ing.IP]; dup {
				t.Errorf("IP %s published by both %s and %s", ing.IP, other, s.Name)
			}
			seen[ing.IP] = s.Name
		}
	}
}

// recordPublished watches services from now on and returns a function that
// reports every IP each service published meanwhile.
func recordPublished(t *testing.T, client kubernetes.Interface) func() map[string][]string {
	t.Helper()
	ctx := testapi.Context(t)
	list, err := client.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	w, err := client.CoreV1().Services("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch services: %v", err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	seen := map[string][]string{}
	go func() {
		for ev := range w.ResultChan() {
			svc, ok := ev.Object.(*corev1.Service)
			if !ok {
				continue
			}
			mu.Lock()
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				seen[svc.Name] = append(seen[svc.Name], ing.IP)
			}
			mu.Unlock()
		}
	}()
	return func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string][]string{}
		for k, v := range seen {
			out[k] = append([]string(nil), v...)
		}
		return out
	}
}
