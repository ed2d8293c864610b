package apiserver_test

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/apiserver/allocator"
	"github.com/nodenet/nodenet/internal/cidrlist"
)

func clusterIPService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
}

func nodePortService(name string, ports ...int32) *corev1.Service {
	s := clusterIPService(name)
	s.Spec.Type = corev1.ServiceTypeNodePort
	s.Spec.Ports = nil
	if len(ports) == 0 {
		ports = []int32{0}
	}
	for i, np := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(80 + i), NodePort: np})
	}
	return s
}

// createConcurrently creates every service with at most par requests in
// flight and returns the results in order.
func createConcurrently(ctx context.Context, ts *testServer, ns string, svcs []*corev1.Service, par int) ([]*corev1.Service, []error) {
	out := make([]*corev1.Service, len(svcs))
	errs := make([]error, len(svcs))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, s := range svcs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = ts.client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		}()
	}
	wg.Wait()
	return out, errs
}

func firstErrors(t testing.TB, errs []error) {
	t.Helper()
	n := 0
	var first []string
	for i, err := range errs {
		if err != nil {
			n++
			if len(first) < 5 {
				first = append(first, fmt.Sprintf("#%d: %v", i, err))
			}
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d creates failed, first: %s", n, len(errs), strings.Join(first, "; "))
	}
}

// checkServiceClaims compares the claim keys in etcd with the allocations
// of every stored Service: same keys, each owned by the right Service, and
// no value held by two Services. It returns the claimed IPs and ports.
func checkServiceClaims(t testing.TB, ts *testServer) (ips, ports map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	list, err := ts.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	wantIPs, wantPorts := map[string]string{}, map[string]string{}
	add := func(m map[string]string, what, v, owner string) {
		if prev, dup := m[v]; dup {
			t.Errorf("%s %s allocated to both %s and %s", what, v, prev, owner)
		}
		m[v] = owner
	}
	for _, s := range list.Items {
		owner := s.Namespace + "/" + s.Name
		for _, ip := range s.Spec.ClusterIPs {
			if ip != "" && ip != corev1.ClusterIPNone {
				add(wantIPs, "ClusterIP", ip, owner)
			}
		}
		for _, p := range s.Spec.Ports {
			if p.NodePort != 0 {
				add(wantPorts, "NodePort", strconv.Itoa(int(p.NodePort)), owner)
			}
		}
		if s.Spec.HealthCheckNodePort != 0 {
			add(wantPorts, "NodePort", strconv.Itoa(int(s.Spec.HealthCheckNodePort)), owner)
		}
	}
	ips, ports = etcdKeys(t, ts, serviceIPClaims), etcdKeys(t, ts, nodePortClaims)
	compareClaims(t, "serviceips", wantIPs, ips)
	compareClaims(t, "servicenodeports", wantPorts, ports)
	return ips, ports
}

func compareClaims(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	var problems []string
	for k, owner := range want {
		switch g, ok := got[k]; {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s (of %s) not claimed", k, owner))
		case g != owner:
			problems = append(problems, fmt.Sprintf("%s claimed by %s, used by %s", k, g, owner))
		}
	}
	for k, owner := range got {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("%s claimed by %s but used by no service", k, owner))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... %d more", len(problems)-10))
		}
		t.Errorf("%s claims (%d keys, %d wanted) do not match the services: %s", what, len(got), len(want), strings.Join(problems, "; "))
	}
}

// expectInvalid checks err is a 422 whose causes name field and whose
// message contains msg.
func expectInvalid(t testing.TB, err error, field, msg string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want 422 Invalid", err)
	}
	st := statusOf(t, err)
	if st.Code != 422 {
		t.Fatalf("code %d, want 422", st.Code)
	}
	if field != "" && !contains(causeFields(err), field) {
		t.Errorf("causes %v do not name %s (%v)", causeFields(err), field, err)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("message %q does not contain %q", err.Error(), msg)
	}
}

func expectNotFound(t testing.TB, ts *testServer, ns, name string) {
	t.Helper()
	if _, err := ts.client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("service %s/%s after a refused create: got %v, want NotFound", ns, name, err)
	}
}

func TestServiceAllocationConcurrent(t *testing.T) {
	ts := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns, n = "alloc", 500
	createNamespace(t, ts, ns)

	svcs := make([]*corev1.Service, n)
	for i := range svcs {
		svcs[i] = nodePortService(fmt.Sprintf("svc-%03d", i))
	}
	start := time.Now()
	created, errs := createConcurrently(ctx, ts, ns, svcs, 50)
	firstErrors(t, errs)
	t.Logf("%d concurrent NodePort creates in %v", n, time.Since(start).Round(time.Millisecond))

	serviceRange := netip.MustParsePrefix("10.96.0.0/12")
	seenIP, seenPort := map[string]string{}, map[int32]string{}
	for _, s := range created {
		ip, err := netip.ParseAddr(s.Spec.ClusterIP)
		switch {
		case err != nil:
			t.Fatalf("%s: bad ClusterIP %q", s.Name, s.Spec.ClusterIP)
		case !serviceRange.Contains(ip) || ip == serviceRange.Addr() || ip.String() == "10.111.255.255":
			t.Errorf("%s: ClusterIP %s outside the usable range %s", s.Name, ip, serviceRange)
		case ip.String() == "10.96.0.1":
			t.Errorf("%s: got the kubernetes service's IP", s.Name)
		case len(s.Spec.ClusterIPs) != 1 || s.Spec.ClusterIPs[0] != s.Spec.ClusterIP:
			t.Errorf("%s: clusterIPs %v do not match clusterIP %s", s.Name, s.Spec.ClusterIPs, s.Spec.ClusterIP)
		}
		if other, dup := seenIP[s.Spec.ClusterIP]; dup {
			t.Errorf("ClusterIP %s given to %s and %s", s.Spec.ClusterIP, other, s.Name)
		}
		seenIP[s.Spec.ClusterIP] = s.Name
		np := s.Spec.Ports[0].NodePort
		if np < 30000 || np > 32767 {
			t.Errorf("%s: NodePort %d outside 30000-32767", s.Name, np)
		}
		if other, dup := seenPort[np]; dup {
			t.Errorf("NodePort %d given to %s and %s", np, other, s.Name)
		}
		seenPort[np] = s.Name
	}
	ips, ports := checkServiceClaims(t, ts)
	if len(ips) != n+1 || len(ports) != n {
		t.Fatalf("claims: %d IPs (want %d incl. 10.96.0.1), %d ports (want %d)", len(ips), n+1, len(ports), n)
	}
	if ips["10.96.0.1"] != "default/kubernetes" {
		t.Errorf("10.96.0.1 claimed by %q, want default/kubernetes", ips["10.96.0.1"])
	}

	t.Run("requesting a taken value is refused and writes nothing", func(t *testing.T) {
		victim := created[0]
		rev := etcdRevision(t, ts)
		s := clusterIPService("wants-taken-ip")
		s.Spec.ClusterIP = victim.Spec.ClusterIP
		_, err := ts.client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		expectInvalid(t, err, "spec.clusterIPs", "already allocated")
		s = nodePortService("wants-taken-port", victim.Spec.Ports[0].NodePort)
		_, err = ts.client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		expectInvalid(t, err, "spec.ports[0].nodePort", "already allocated")
		// The path names the port that clashes, not the first one.
		s = nodePortService("wants-taken-second-port", 0, victim.Spec.Ports[0].NodePort)
		_, err = ts.client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		expectInvalid(t, err, "spec.ports[1].nodePort", "provided port is already allocated")
		s = nodePortService("wants-taken-health-port")
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = victim.Spec.Ports[0].NodePort
		_, err = ts.client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		expectInvalid(t, err, "spec.healthCheckNodePort", "provided port is already allocated")
		// Out of range values are refused before anything is tried.
		s = nodePortService("wants-port-out-of-range", 8080)
		_, err = ts.client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		expectInvalid(t, err, "spec.ports[0].nodePort", "30000-32767")
		if got := etcdRevision(t, ts); got != rev {
			t.Errorf("refused creates wrote to etcd: revision %d -> %d", rev, got)
		}
		for _, name := range []string{"wants-taken-ip", "wants-taken-port", "wants-taken-second-port", "wants-taken-health-port", "wants-port-out-of-range"} {
			expectNotFound(t, ts, ns, name)
		}
		ips, _ := checkServiceClaims(t, ts)
		if ips[victim.Spec.ClusterIP] != ns+"/"+victim.Name {
			t.Errorf("the taken IP changed owner: %q", ips[victim.Spec.ClusterIP])
		}
	})

	t.Run("single-stack server refuses RequireDualStack", func(t *testing.T) {
		rev := etcdRevision(t, ts)
		s := clusterIPService("dual-required")
		s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
		_, err := ts.client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		expectInvalid(t, err, "spec.ipFamilyPolicy", "dual-stack")
		if got := etcdRevision(t, ts); got != rev {
			t.Errorf("refused create wrote to etcd: revision %d -> %d", rev, got)
		}
		expectNotFound(t, ts, ns, "dual-required")
	})

	// Delete 50: their claims go in the same transaction.
	deleted := created[:50]
	for _, s := range deleted {
		if err := ts.client.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ips, ports = checkServiceClaims(t, ts)
	for _, s := range deleted {
		if _, ok := ips[s.Spec.ClusterIP]; ok {
			t.Errorf("IP %s of deleted %s still claimed", s.Spec.ClusterIP, s.Name)
		}
		if _, ok := ports[strconv.Itoa(int(s.Spec.Ports[0].NodePort))]; ok {
			t.Errorf("NodePort %d of deleted %s still claimed", s.Spec.Ports[0].NodePort, s.Name)
		}
	}
	if len(ips) != n-50+1 || len(ports) != n-50 {
		t.Fatalf("after deleting 50: %d IP claims, %d port claims", len(ips), len(ports))
	}
	// A released IP and port can be requested again at once.
	reuse := nodePortService("reuse", deleted[0].Spec.Ports[0].NodePort)
	reuse.Spec.ClusterIP = deleted[0].Spec.ClusterIP
	got, err := ts.client.CoreV1().Services(ns).Create(ctx, reuse, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting released IP %s / port %d: %v", deleted[0].Spec.ClusterIP, deleted[0].Spec.Ports[0].NodePort, err)
	}
	if got.Spec.ClusterIP != deleted[0].Spec.ClusterIP || got.Spec.Ports[0].NodePort != deleted[0].Spec.Ports[0].NodePort {
		t.Fatalf("reuse got %s/%d", got.Spec.ClusterIP, got.Spec.Ports[0].NodePort)
	}

	// Restart: every service and claim survives, and new creates avoid them.
	before, err := ts.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ipsBefore, portsBefore := checkServiceClaims(t, ts)
	ts.restart(t)
	after, err := ts.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before.Items) || len(after.Items) != n-50+2 {
		t.Fatalf("services after restart: %d, before: %d, want %d", len(after.Items), len(before.Items), n-50+2)
	}
	byName := map[string]corev1.Service{}
	for _, s := range before.Items {
		byName[s.Namespace+"/"+s.Name] = s
	}
	for _, s := range after.Items {
		b := byName[s.Namespace+"/"+s.Name]
		if b.UID != s.UID || b.ResourceVersion != s.ResourceVersion || b.Spec.ClusterIP != s.Spec.ClusterIP || b.Spec.Ports[0].NodePort != s.Spec.Ports[0].NodePort {
			t.Errorf("%s/%s changed across the restart", s.Namespace, s.Name)
		}
	}
	ipsAfter, portsAfter := checkServiceClaims(t, ts)
	compareClaims(t, "serviceips across restart", ipsBefore, ipsAfter)
	compareClaims(t, "servicenodeports across restart", portsBefore, portsAfter)
	more := make([]*corev1.Service, 50)
	for i := range more {
		more[i] = nodePortService(fmt.Sprintf("post-restart-%02d", i))
	}
	newSvcs, errs := createConcurrently(ctx, ts, ns, more, 25)
	firstErrors(t, errs)
	for _, s := range newSvcs {
		if owner, taken := ipsBefore[s.Spec.ClusterIP]; taken {
			t.Errorf("%s got IP %s already held by %s", s.Name, s.Spec.ClusterIP, owner)
		}
		if owner, taken := portsBefore[strconv.Itoa(int(s.Spec.Ports[0].NodePort))]; taken {
			t.Errorf("%s got port %d already held by %s", s.Name, s.Spec.Ports[0].NodePort, owner)
		}
	}
	ips, ports = checkServiceClaims(t, ts)
	if len(ips) != n-50+2+50 || len(ports) != n-50+1+50 {
		t.Errorf("final claims: %d IPs, %d ports", len(ips), len(ports))
	}
}

// TestServiceNodePortsFillConcurrently fills a small NodePort range with
// concurrent creates: every create that has a free port left must succeed,
// even when two creates raced for the same port.
func TestServiceNodePortsFillConcurrently(t *testing.T) {
	ts := startServer(t, func(c *apiserver.Config) { c.ServiceNodePortRange = allocator.PortRange{Base: 30000, Size: 120} })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, n = "fill", 120
	createNamespace(t, ts, ns)
	svcs := make([]*corev1.Service, n)
	for i := range svcs {
		svcs[i] = nodePortService(fmt.Sprintf("fill-%03d", i))
	}
	_, errs := createConcurrently(ctx, ts, ns, svcs, 50)
	firstErrors(t, errs)
	_, ports := checkServiceClaims(t, ts)
	if len(ports) != n {
		t.Fatalf("%d ports claimed, want the whole range (%d)", len(ports), n)
	}
	_, err := ts.client.CoreV1().Services(ns).Create(ctx, nodePortService("one-too-many"), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.ports[0].nodePort", "30000-30119 is full")
	expectNotFound(t, ts, ns, "one-too-many")
}

func TestServiceDualStack(t *testing.T) {
	ts := startServer(t, func(c *apiserver.Config) {
		c.ServiceClusterIPRanges = cidrlist.MustParse("10.96.0.0/16", "fd00:10:96::/112")
	})
	ctx := ctxT(t)
	v4, v6 := netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")
	for _, policy := range []corev1.IPFamilyPolicy{corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack} {
		name := "dual-" + strings.ToLower(string(policy))
		s := nodePortService(name)
		s.Spec.IPFamilyPolicy = ptr(policy)
		got, err := ts.client.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		if len(got.Spec.ClusterIPs) != 2 || len(got.Spec.IPFamilies) != 2 {
			t.Fatalf("%s: clusterIPs %v families %v, want two", policy, got.Spec.ClusterIPs, got.Spec.IPFamilies)
		}
		a, b := netip.MustParseAddr(got.Spec.ClusterIPs[0]), netip.MustParseAddr(got.Spec.ClusterIPs[1])
		if !v4.Contains(a) || !v6.Contains(b) || got.Spec.IPFamilies[0] != corev1.IPv4Protocol || got.Spec.IPFamilies[1] != corev1.IPv6Protocol {
			t.Errorf("%s: clusterIPs %v families %v, want IPv4 from %s then IPv6 from %s", policy, got.Spec.ClusterIPs, got.Spec.IPFamilies, v4, v6)
		}
		if got.Spec.ClusterIP != got.Spec.ClusterIPs[0] {
			t.Errorf("%s: clusterIP %s is not clusterIPs[0]", policy, got.Spec.ClusterIP)
		}
	}
	// A single-stack IPv6 service on a dual-stack cluster.
	s := clusterIPService("v6-only")
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	got, err := ts.client.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.ClusterIPs) != 1 || !v6.Contains(netip.MustParseAddr(got.Spec.ClusterIP)) {
		t.Errorf("IPv6 single-stack: clusterIPs %v", got.Spec.ClusterIPs)
	}
	ips, _ := checkServiceClaims(t, ts)
	if len(ips) != 1+2+2+1 {
		t.Errorf("%d IP claims, want 6: %v", len(ips), ips)
	}
	// Deleting a dual-stack service releases both families.
	dual, _ := ts.client.CoreV1().Services("default").Get(ctx, "dual-preferdualstack", metav1.GetOptions{})
	if err := ts.client.CoreV1().Services("default").Delete(ctx, dual.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ips, _ = checkServiceClaims(t, ts)
	for _, ip := range dual.Spec.ClusterIPs {
		if _, ok := ips[ip]; ok {
			t.Errorf("IP %s of the deleted dual-stack service still claimed", ip)
		}
	}
}

// TestServiceRangeExhaustion uses a /29 (6 usable IPs, one for the
// kubernetes service) and a 3-port NodePort range: failed and dry-run
// creates must not use up values, a full range is a clear 422 that writes
// nothing, and freed values come back — also after a restart.
func TestServiceRangeExhaustion(t *testing.T) {
	ts := startServer(t, func(c *apiserver.Config) {
		c.ServiceClusterIPRanges = cidrlist.MustParse("10.100.0.0/29")
		c.ServiceNodePortRange = allocator.PortRange{Base: 30000, Size: 3}
	})
	ctx := ctxT(t)
	svcs := ts.client.CoreV1().Services("default")
	if _, err := svcs.Create(ctx, nodePortService("np-a", 30000), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Creates that fail after the allocator picked values for them.
	rev := etcdRevision(t, ts)
	if _, err := svcs.Create(ctx, clusterIPService("dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	_, err := svcs.Create(ctx, nodePortService("np-clash", 30000), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.ports[0].nodePort", "already allocated")
	_, err = svcs.Create(ctx, nodePortService("np-too-many", 0, 0, 0), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.ports[2].nodePort", "30000-30002 is full")
	if _, err := svcs.Create(ctx, nodePortService("np-a"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("duplicate name: got %v, want AlreadyExists", err)
	}
	if got := etcdRevision(t, ts); got != rev {
		t.Fatalf("failed creates wrote to etcd: revision %d -> %d", rev, got)
	}
	for _, name := range []string{"dry", "np-clash", "np-too-many"} {
		expectNotFound(t, ts, "default", name)
	}

	// Everything left is still free: two node ports and four IPs.
	if _, err := svcs.Create(ctx, nodePortService("np-b", 0, 0), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the last two node ports: %v", err)
	}
	for i := 0; i < 3; i++ {
		if _, err := svcs.Create(ctx, clusterIPService(fmt.Sprintf("c%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("IP %d of the 3 left: %v", i+1, err)
		}
	}
	ips, ports := checkServiceClaims(t, ts)
	if len(ips) != 6 || len(ports) != 3 {
		t.Fatalf("full ranges: %d IP claims (want 6), %d port claims (want 3)", len(ips), len(ports))
	}

	// Full: a clear 422, nothing written.
	rev = etcdRevision(t, ts)
	_, err = svcs.Create(ctx, clusterIPService("no-ip-left"), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.clusterIPs[0]", "range 10.100.0.0/29 is full")
	_, err = svcs.Create(ctx, nodePortService("no-port-left"), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "is full") {
		t.Fatalf("no port or IP left: got %v, want 422 ... is full", err)
	}
	if got := etcdRevision(t, ts); got != rev {
		t.Fatalf("refused creates wrote to etcd: revision %d -> %d", rev, got)
	}
	expectNotFound(t, ts, "default", "no-ip-left")
	expectNotFound(t, ts, "default", "no-port-left")

	// A freed IP is handed out again, after a restart too.
	c0, _ := svcs.Get(ctx, "c0", metav1.GetOptions{})
	if err := svcs.Delete(ctx, "c0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := svcs.Create(ctx, clusterIPService("reuse"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create after freeing one IP: %v", err)
	}
	if got.Spec.ClusterIP != c0.Spec.ClusterIP {
		t.Errorf("got %s, want the freed %s", got.Spec.ClusterIP, c0.Spec.ClusterIP)
	}
	c1, _ := svcs.Get(ctx, "c1", metav1.GetOptions{})
	if err := svcs.Delete(ctx, "c1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ts.restart(t)
	svcs = ts.client.CoreV1().Services("default")
	_, err = svcs.Create(ctx, clusterIPService("after-restart-full"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create after restart with one IP free: %v", err)
	}
	got, _ = svcs.Get(ctx, "after-restart-full", metav1.GetOptions{})
	if got.Spec.ClusterIP != c1.Spec.ClusterIP {
		t.Errorf("after restart got %s, want the only free IP %s", got.Spec.ClusterIP, c1.Spec.ClusterIP)
	}
	_, err = svcs.Create(ctx, clusterIPService("still-full"), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.clusterIPs[0]", "is full")
	checkServiceClaims(t, ts)
}

// TestServiceAllocationStaleHints: claims written by someone else (another
// API server sharing the etcd) are unknown to this server's allocator until
// its periodic reload. A pick that turns out taken must be retried with
// another value — not reported as "already allocated", which is only right
// for values the client asked for.
func TestServiceAllocationStaleHints(t *testing.T) {
	ts := startServer(t, func(c *apiserver.Config) { c.ServiceClusterIPRanges = cidrlist.MustParse("10.100.0.0/29") })
	ctx := ctxT(t)
	// .1 is the kubernetes service; another server claims all of .2-.6 but
	// one. Each round restarts, so the allocator starts from a true view.
	for round, free := range []string{"10.100.0.2", "10.100.0.6", "10.100.0.4"} {
		var others []string
		for j := 2; j <= 6; j++ {
			if ip := fmt.Sprintf("10.100.0.%d", j); ip != free {
				others = append(others, ip)
				if _, err := ts.EtcdClient().Put(ctx, serviceIPClaims+ip, "other/apiserver"); err != nil {
					t.Fatal(err)
				}
			}
		}
		svcs := ts.client.CoreV1().Services("default")
		name := fmt.Sprintf("round-%d", round)
		got, err := svcs.Create(ctx, clusterIPService(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("round %d: one IP (%s) free, the others claimed elsewhere: %v", round, free, err)
		}
		if got.Spec.ClusterIP != free {
			t.Fatalf("round %d: got %s, want the only free IP %s", round, got.Spec.ClusterIP, free)
		}
		if err := svcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, ip := range others {
			if _, err := ts.EtcdClient().Delete(ctx, serviceIPClaims+ip); err != nil {
				t.Fatal(err)
			}
		}
		ts.restart(t)
	}
	checkServiceClaims(t, ts)
}
