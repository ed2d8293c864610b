package apiserver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// snapshot reads one object of each kind the restart test creates and
// returns "kind/ns/name" -> metadata.
func restartSnapshot(t *testing.T, c kubernetes.Interface) map[string]metav1.ObjectMeta {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := map[string]metav1.ObjectMeta{}
	get := func(key string, obj metav1.Object, err error) {
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		out[key] = metav1.ObjectMeta{UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(), Labels: obj.GetLabels()}
	}
	ns, err := c.CoreV1().Namespaces().Get(ctx, "persist", metav1.GetOptions{})
	get("namespace/persist", ns, err)
	node, err := c.CoreV1().Nodes().Get(ctx, "node-p", metav1.GetOptions{})
	get("node/node-p", node, err)
	pod, err := c.CoreV1().Pods("persist").Get(ctx, "pod-p", metav1.GetOptions{})
	get("pod/persist/pod-p", pod, err)
	svc, err := c.CoreV1().Services("persist").Get(ctx, "svc-p", metav1.GetOptions{})
	get("service/persist/svc-p", svc, err)
	cm, err := c.CoreV1().ConfigMaps("persist").Get(ctx, "cm-p", metav1.GetOptions{})
	get("configmap/persist/cm-p", cm, err)
	slice, err := c.DiscoveryV1().EndpointSlices("persist").Get(ctx, "svc-p-1", metav1.GetOptions{})
	get("endpointslice/persist/svc-p-1", slice, err)
	lease, err := c.CoordinationV1().Leases("persist").Get(ctx, "lease-p", metav1.GetOptions{})
	get("lease/persist/lease-p", lease, err)
	ev, err := c.CoreV1().Events("persist").Get(ctx, "ev-p", metav1.GetOptions{})
	get("event/persist/ev-p", ev, err)
	return out
}

func TestRestartKeepsObjectsAndInformers(t *testing.T) {
	ts := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := ts.client
	createNamespace(t, ts, "persist")
	mustCreate := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-p"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.7.0/24", PodCIDRs: []string{"10.244.7.0/24"}}}, metav1.CreateOptions{})
	mustCreate("node", err)
	_, err = c.CoreV1().Pods("persist").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-p"},
		Spec: corev1.PodSpec{NodeName: "node-p", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	mustCreate("pod", err)
	svc, err := c.CoreV1().Services("persist").Create(ctx, nodePortService("svc-p"), metav1.CreateOptions{})
	mustCreate("service", err)
	_, err = c.CoreV1().ConfigMaps("persist").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-p"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	mustCreate("configmap", err)
	_, err = c.DiscoveryV1().EndpointSlices("persist").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "svc-p-1", Labels: map[string]string{discoveryv1.LabelServiceName: "svc-p"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.7.5"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(80))}},
	}, metav1.CreateOptions{})
	mustCreate("endpointslice", err)
	_, err = c.CoordinationV1().Leases("persist").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lease-p"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("node-p"), LeaseDurationSeconds: ptr(int32(40))}}, metav1.CreateOptions{})
	mustCreate("lease", err)
	_, err = c.CoreV1().Events("persist").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev-p"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "persist", Name: "pod-p"}, Reason: "Started", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "kubelet"}}, metav1.CreateOptions{})
	mustCreate("event", err)

	// An informer built from the pre-restart config keeps running across
	// the restart (ts.restart keeps the port, certificates and token).
	factory := informers.NewSharedInformerFactory(kubernetes.NewForConfigOrDie(ts.config), 0)
	cmInf := factory.Core().V1().ConfigMaps().Informer()
	var mu sync.Mutex
	added := map[string]bool{}
	_, _ = cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				mu.Lock()
				added[cm.Namespace+"/"+cm.Name] = true
				mu.Unlock()
			}
		},
	})
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), cmInf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	seen := func(key string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return added[key] }
	}
	waitFor(t, 5*time.Second, "informer to see cm-p", seen("persist/cm-p"))

	before := restartSnapshot(t, c)
	claimsBefore, _ := checkServiceClaims(t, ts)
	ts.restart(t)
	c = ts.client
	after := restartSnapshot(t, c)
	for key, b := range before {
		a := after[key]
		if a.UID != b.UID || a.ResourceVersion != b.ResourceVersion {
			t.Errorf("%s: uid/rv %s/%s before the restart, %s/%s after", key, b.UID, b.ResourceVersion, a.UID, a.ResourceVersion)
		}
	}
	ipsAfter, _ := checkServiceClaims(t, ts)
	compareClaims(t, "serviceips across restart", claimsBefore, ipsAfter)
	if _, ok := ipsAfter[svc.Spec.ClusterIP]; !ok {
		t.Errorf("claim of %s lost in the restart", svc.Spec.ClusterIP)
	}
	// The restarted server's resourceVersions continue where they were.
	cm, err := c.CoreV1().ConfigMaps("persist").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rvLess(cm.ResourceVersion, before["configmap/persist/cm-p"].ResourceVersion) {
		t.Errorf("new object rv %s is older than pre-restart rv %s", cm.ResourceVersion, before["configmap/persist/cm-p"].ResourceVersion)
	}
	// The informer finds its way back by itself: rewatch or relist.
	waitFor(t, 20*time.Second, "informer to see a ConfigMap created after the restart", seen("persist/after-restart"))
	if cmInf.IsStopped() {
		t.Fatal("informer stopped")
	}
	// And its store is complete and current.
	waitFor(t, 10*time.Second, "informer store to hold both ConfigMaps", func() bool {
		_, ok1, _ := cmInf.GetStore().GetByKey("persist/cm-p")
		_, ok2, _ := cmInf.GetStore().GetByKey("persist/after-restart")
		return ok1 && ok2
	})
}

// rvLess compares resourceVersions as the integers this server uses.
func rvLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}
