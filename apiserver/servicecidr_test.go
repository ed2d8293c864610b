package apiserver_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/testapi"
)

// startInformer runs a shared informer factory on client until the test
// ends and returns after inf has synced (list + watch established).
func startInformer(t *testing.T, client kubernetes.Interface, pick func(informers.SharedInformerFactory) cache.SharedIndexInformer) cache.SharedIndexInformer {
	t.Helper()
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := pick(factory)
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !cache.WaitForCacheSync(ctxT(t).Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	return inf
}

// TestServiceCIDRAsKubeProxyWatchesIt: kube-proxy runs a shared informer on
// networking.k8s.io/v1 ServiceCIDRs; its list and watch must work and the
// default one must carry the configured ranges and Ready=True.
func TestServiceCIDRAsKubeProxyWatchesIt(t *testing.T) {
	ts := startServer(t, func(c *apiserver.Config) {
		c.ServiceClusterIPRanges = cidrlist.MustParse("10.96.0.0/16", "fd00:10:96::/112")
	})
	ctx := ctxT(t)
	inf := startInformer(t, ts.client, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Networking().V1().ServiceCIDRs().Informer()
	})
	obj, ok, err := inf.GetStore().GetByKey("kubernetes")
	if err != nil || !ok {
		t.Fatalf("default ServiceCIDR not in the informer: %v %v", ok, err)
	}
	sc := obj.(*networkingv1.ServiceCIDR)
	if want := []string{"10.96.0.0/16", "fd00:10:96::/112"}; !slices.Equal(sc.Spec.CIDRs, want) {
		t.Errorf("cidrs %v, want %v", sc.Spec.CIDRs, want)
	}
	if !apimeta.IsStatusConditionTrue(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady) {
		t.Errorf("conditions %+v, want Ready=True", sc.Status.Conditions)
	}
	if !slices.Contains(sc.Finalizers, "networking.k8s.io/service-cidr-finalizer") {
		t.Errorf("finalizers %v, want the service-cidr finalizer", sc.Finalizers)
	}

	// The watch delivers changes: a label added through the API.
	sc.Labels = map[string]string{"team": "net"}
	if _, err := ts.client.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label the default ServiceCIDR: %v", err)
	}
	testapi.Eventually(t, 10*time.Second, "label seen by the informer", func() bool {
		o, _, _ := inf.GetStore().GetByKey("kubernetes")
		return o != nil && o.(*networkingv1.ServiceCIDR).Labels["team"] == "net"
	})

	// What the allocator would not honour is refused, and changes nothing.
	rev := etcdRevision(t, ts)
	extra := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.200.0.0/16"}}}
	_, err = ts.client.NetworkingV1().ServiceCIDRs().Create(ctx, extra, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "--service-cluster-ip-range") {
		t.Errorf("create an extra ServiceCIDR: %v, want Forbidden naming --service-cluster-ip-range", err)
	}
	if err := ts.client.NetworkingV1().ServiceCIDRs().Delete(ctx, "kubernetes", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete the default ServiceCIDR: %v, want Forbidden", err)
	}
	cur, _ := ts.client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	cur.Spec.CIDRs = []string{"10.97.0.0/16"}
	_, err = ts.client.NetworkingV1().ServiceCIDRs().Update(ctx, cur, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !slices.Equal(causeFields(err), []string{"spec.cidrs"}) {
		t.Errorf("change spec.cidrs: %v (fields %v), want Invalid on spec.cidrs", err, causeFields(err))
	}
	if got := etcdRevision(t, ts); got != rev {
		t.Errorf("refused requests wrote to etcd (revision %d -> %d)", rev, got)
	}
}

// TestServiceCIDRFollowsFlags: the default ServiceCIDR is rewritten from
// --service-cluster-ip-range on start.
func TestServiceCIDRFollowsFlags(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	sc, err := ts.client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || !slices.Equal(sc.Spec.CIDRs, []string{"10.96.0.0/12"}) {
		t.Fatalf("default ServiceCIDR %v, %v; want 10.96.0.0/12", sc.Spec.CIDRs, err)
	}
	ts.cfg.ServiceClusterIPRanges = cidrlist.MustParse("10.96.0.0/12", "fd00:10:96::/112")
	ts.restart(t)
	sc, err = ts.client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || !slices.Equal(sc.Spec.CIDRs, []string{"10.96.0.0/12", "fd00:10:96::/112"}) || sc.Generation != 2 {
		t.Fatalf("after restart dual-stack: %v generation %d, %v", sc.Spec.CIDRs, sc.Generation, err)
	}
	rv := sc.ResourceVersion
	ts.restart(t)
	sc, _ = ts.client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if sc.ResourceVersion != rv {
		t.Errorf("a restart with unchanged flags rewrote the ServiceCIDR (rv %s -> %s)", rv, sc.ResourceVersion)
	}
}

// ipAddressSet follows IPAddresses through an informer: ip → parent.
type ipAddressSet struct {
	inf cache.SharedIndexInformer
}

func (s *ipAddressSet) snapshot() map[string]string {
	out := map[string]string{}
	for _, o := range s.inf.GetStore().List() {
		a := o.(*networkingv1.IPAddress)
		p := a.Spec.ParentRef
		out[a.Name] = p.Resource + "/" + p.Namespace + "/" + p.Name
	}
	return out
}

func (s *ipAddressSet) waitFor(t *testing.T, what string, want map[string]string) {
	t.Helper()
	var last map[string]string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if last = s.snapshot(); mapsEqual(last, want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: IPAddresses %v, want %v", what, last, want)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestIPAddressesFollowServices: one IPAddress per allocated ClusterIP,
// created and deleted with its Service, read-only through the API, and
// converged with the Services' claims after a restart.
func TestIPAddressesFollowServices(t *testing.T) {
	ts := startServer(t, func(c *apiserver.Config) {
		c.ServiceClusterIPRanges = cidrlist.MustParse("10.96.0.0/16", "fd00:10:96::/112")
	})
	ctx := ctxT(t)
	set := &ipAddressSet{inf: startInformer(t, ts.client, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Networking().V1().IPAddresses().Informer()
	})}
	want := map[string]string{"10.96.0.1": "services/default/kubernetes"}
	set.waitFor(t, "at start", want)

	dual := clusterIPService("dual")
	dual.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
	d, err := ts.client.CoreV1().Services("default").Create(ctx, dual, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	headless := clusterIPService("headless")
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	if _, err := ts.client.CoreV1().Services("default").Create(ctx, headless, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range d.Spec.ClusterIPs {
		want[ip] = "services/default/dual"
	}
	set.waitFor(t, "after creating a dual-stack and a headless Service", want)

	a, err := ts.client.NetworkingV1().IPAddresses().Get(ctx, d.Spec.ClusterIPs[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Labels[networkingv1.LabelIPAddressFamily] != "IPv6" || a.Labels[networkingv1.LabelManagedBy] != "ipallocator.k8s.io" || a.Spec.ParentRef.Group != "" || a.UID == "" {
		t.Errorf("IPAddress %s: labels %v parentRef %+v uid %q", a.Name, a.Labels, a.Spec.ParentRef, a.UID)
	}

	// Read-only: writes answer 405 and change nothing.
	rev := etcdRevision(t, ts)
	if err := ts.client.NetworkingV1().IPAddresses().Delete(ctx, d.Spec.ClusterIP, metav1.DeleteOptions{}); !apierrors.IsMethodNotSupported(err) || !strings.Contains(err.Error(), "Service") {
		t.Errorf("delete an IPAddress: %v, want 405 pointing at the Service", err)
	}
	stray := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.96.9.9"}, Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "x"}}}
	if _, err := ts.client.NetworkingV1().IPAddresses().Create(ctx, stray, metav1.CreateOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("create an IPAddress: %v, want 405", err)
	}
	if got := etcdRevision(t, ts); got != rev {
		t.Errorf("refused writes changed etcd (revision %d -> %d)", rev, got)
	}

	if err := ts.client.CoreV1().Services("default").Delete(ctx, "dual", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range d.Spec.ClusterIPs {
		delete(want, ip)
	}
	set.waitFor(t, "after deleting the dual-stack Service", want)

	// Drift written straight into etcd (as data from before IPAddresses
	// existed, or a hand edit): a claim without its IPAddress and an
	// IPAddress without a claim. A restart converges both.
	s2, err := ts.client.CoreV1().Services("default").Create(ctx, clusterIPService("kept"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want[s2.Spec.ClusterIP] = "services/default/kept"
	set.waitFor(t, "after creating kept", want)
	if _, err := ts.EtcdClient().Delete(ctx, "/registry/networking.k8s.io/ipaddresses/"+s2.Spec.ClusterIP); err != nil {
		t.Fatal(err)
	}
	orphan := `{"kind":"IPAddress","apiVersion":"networking.k8s.io/v1","metadata":{"name":"10.96.7.7","uid":"u"},"spec":{"parentRef":{"resource":"services","namespace":"default","name":"gone"}}}`
	if _, err := ts.EtcdClient().Put(ctx, "/registry/networking.k8s.io/ipaddresses/10.96.7.7", orphan); err != nil {
		t.Fatal(err)
	}
	ts.restart(t)
	got, err := ts.client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, a := range got.Items {
		have[a.Name] = "services/" + a.Spec.ParentRef.Namespace + "/" + a.Spec.ParentRef.Name
	}
	if !mapsEqual(have, want) {
		t.Errorf("after restart: IPAddresses %v, want %v", have, want)
	}
	ips, _ := checkServiceClaims(t, ts)
	if len(ips) != len(have) {
		t.Errorf("%d ClusterIP claims but %d IPAddresses", len(ips), len(have))
	}
}
