package apiserver_test

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nodenet/nodenet/apiserver"
)

func ptr[T any](v T) *T { return &v }

func TestBootstrapObjects(t *testing.T) {
	// 192.0.2.10 (TEST-NET-1) is only written into the slice; nothing is sent to it.
	ts := startServer(t, func(c *apiserver.Config) { c.AdvertiseAddress = "192.0.2.10" })
	ctx := ctxT(t)
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if _, err := ts.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s: %v", ns, err)
		}
	}
	svc, err := ts.client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("kubernetes service: %v", err)
	}
	if svc.Spec.ClusterIP != "10.96.0.1" {
		t.Errorf("kubernetes service ClusterIP = %s, want 10.96.0.1", svc.Spec.ClusterIP)
	}
	slice, err := ts.client.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("kubernetes endpointslice: %v", err)
	}
	if got := slice.Endpoints[0].Addresses[0]; got != "192.0.2.10" {
		t.Errorf("kubernetes endpoint = %s, want 192.0.2.10", got)
	}
	if err := ts.client.CoreV1().Namespaces().Delete(ctx, "kube-system", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting kube-system: got %v, want Forbidden", err)
	}
}

func TestCRUDEveryResource(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	ns := "crud"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("nodes", func(t *testing.T) {
		n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.244.1.0/24", []string{"10.244.1.0/24"}
		if n, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.10"}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if n, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if n.Spec.PodCIDR != "10.244.1.0/24" || len(n.Status.Addresses) != 1 {
			t.Fatalf("node after updates: %+v", n)
		}
		// A status update must not change spec, a spec update not status.
		n.Spec.Unschedulable = true
		n.Status.Addresses = nil
		if n, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if !n.Spec.Unschedulable || len(n.Status.Addresses) != 1 {
			t.Fatalf("update changed status or lost spec: %+v", n)
		}
		patch := []byte(`{"metadata":{"annotations":{"flannel.alpha.coreos.com/public-ip":"192.168.0.10"}}}`)
		if n, err = c.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if n.Annotations["flannel.alpha.coreos.com/public-ip"] != "192.168.0.10" {
			t.Fatalf("patch lost: %v", n.Annotations)
		}
		cond := []byte(`{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","reason":"FlannelIsUp"}]}}`)
		if n, err = c.CoreV1().Nodes().PatchStatus(ctx, "node-a", cond); err != nil {
			t.Fatal(err)
		}
		if len(n.Status.Conditions) != 2 {
			t.Fatalf("strategic merge of conditions by type: got %+v", n.Status.Conditions)
		}
		if err := c.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("get after delete: %v", err)
		}
	})

	t.Run("pods", func(t *testing.T) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "echo"}}}}
		p, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodPending || p.UID == "" || p.Generation != 1 {
			t.Fatalf("created pod: phase=%s uid=%s gen=%d", p.Status.Phase, p.UID, p.Generation)
		}
		bind := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-b"}}
		if err := c.CoreV1().Pods(ns).Bind(ctx, bind, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.CoreV1().Pods(ns).Bind(ctx, bind, metav1.CreateOptions{}); !apierrors.IsConflict(err) {
			t.Fatalf("second bind: got %v, want Conflict", err)
		}
		p, _ = c.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, "10.244.1.5", []corev1.PodIP{{IP: "10.244.1.5"}}
		if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		list, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-b"})
		if err != nil || len(list.Items) != 1 || list.Items[0].Status.PodIP != "10.244.1.5" {
			t.Fatalf("list by spec.nodeName: %v %+v", err, list)
		}
		if list, _ := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=other"}); len(list.Items) != 0 {
			t.Fatalf("field selector matched %d pods on another node", len(list.Items))
		}
		// Graceful deletion: the pod is marked terminating first.
		if err := c.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		p, err = c.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 30 {
			t.Fatalf("graceful delete: %v %+v", err, p.ObjectMeta)
		}
		if err := c.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("pod after delete with grace 0: %v", err)
		}
	})

	t.Run("finalizers", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}, Data: map[string]string{"a": "1"}}
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		cur, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "held", metav1.GetOptions{})
		if err != nil || cur.DeletionTimestamp == nil {
			t.Fatalf("finalizer did not hold the object: %v", err)
		}
		patch := []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`)
		if _, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, "held", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("object survived losing its last finalizer: %v", err)
		}
	})

	t.Run("services", func(t *testing.T) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}
		svc, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.ClusterIP == "" || svc.Spec.Ports[0].NodePort < 30000 || svc.Spec.Ports[0].Protocol != corev1.ProtocolTCP {
			t.Fatalf("allocation/defaults missing: %+v", svc.Spec)
		}
		ip, np := svc.Spec.ClusterIP, svc.Spec.Ports[0].NodePort
		// An update that leaves allocated fields empty keeps them.
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs, svc.Spec.Ports[0].NodePort = "", nil, 0
		svc.Labels = map[string]string{"tier": "front"}
		if svc, err = c.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if svc.Spec.ClusterIP != ip || svc.Spec.Ports[0].NodePort != np {
			t.Fatalf("update lost allocations: %s/%d -> %s/%d", ip, np, svc.Spec.ClusterIP, svc.Spec.Ports[0].NodePort)
		}
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		if svc, err = c.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.100.1"}}
		if svc, err = c.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil || len(svc.Status.LoadBalancer.Ingress) != 1 {
			t.Fatalf("status update: %v", err)
		}
		// Change to ClusterIP: the node port goes away.
		merge := []byte(`{"spec":{"type":"ClusterIP"}}`)
		if svc, err = c.CoreV1().Services(ns).Patch(ctx, "web", types.MergePatchType, merge, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Ports[0].NodePort != 0 {
			t.Fatalf("nodePort kept after type change: %d", svc.Spec.Ports[0].NodePort)
		}
		if err := c.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("endpointslices", func(t *testing.T) {
		for i, svc := range []string{"a", "b"} {
			s := &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{GenerateName: svc + "-", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.244.1.%d", i+1)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
				Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
			}
			created, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(created.Name, svc+"-") || len(created.Name) != len(svc)+6 {
				t.Fatalf("generateName gave %q", created.Name)
			}
		}
		list, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=b"})
		if err != nil || len(list.Items) != 1 || list.Items[0].Endpoints[0].Addresses[0] != "10.244.1.2" {
			t.Fatalf("label selector list: %v %+v", err, list)
		}
		if err := c.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=a"}); err != nil {
			t.Fatal(err)
		}
		if list, _ := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{}); len(list.Items) != 1 {
			t.Fatalf("deletecollection left %d slices, want 1", len(list.Items))
		}
	})

	t.Run("leases", func(t *testing.T) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Namespace: "kube-node-lease"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("node-a"), LeaseDurationSeconds: ptr(int32(40))}}
		l, err := c.CoordinationV1().Leases("kube-node-lease").Create(ctx, l, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stale := l.DeepCopy()
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		if _, err := c.CoordinationV1().Leases("kube-node-lease").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		stale.Spec.HolderIdentity = ptr("thief")
		if _, err := c.CoordinationV1().Leases("kube-node-lease").Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Fatalf("stale update: got %v, want Conflict", err)
		}
	})

	t.Run("events", func(t *testing.T) {
		e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "node-a.1"}, InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "node-a"},
			Reason: "CIDRNotAvailable", Message: "no CIDR left", Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: "nodeipam"}}
		// Events about cluster-scoped objects live in "default".
		if _, err := c.CoreV1().Events(ns).Create(ctx, e, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Fatalf("node event outside default: got %v, want Invalid", err)
		}
		if _, err := c.CoreV1().Events("default").Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		list, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "CIDRNotAvailable").String()})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("events by reason: %v %d", err, len(list.Items))
		}
		ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "svc.1"}, EventTime: metav1.NowMicro(), ReportingController: "nodenet/lb",
			ReportingInstance: "x", Action: "Allocate", Reason: "IPAllocated", Type: corev1.EventTypeNormal,
			Regarding: corev1.ObjectReference{Kind: "Service", Name: "web", Namespace: ns}}
		if _, err := c.EventsV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("configmaps", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg"}, Data: map[string]string{"net-conf.json": `{"Network":"10.244.0.0/16"}`}}
		cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rv := cm.ResourceVersion
		// A no-op update writes nothing.
		same, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil || same.ResourceVersion != rv {
			t.Fatalf("no-op update: %v, rv %s -> %s", err, rv, same.ResourceVersion)
		}
	})
}

func TestListPagingAndResourceVersions(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	for i := 0; i < 25; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}}
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	opts := metav1.ListOptions{Limit: 10}
	pages := 0
	var firstRV string
	for {
		list, err := c.CoreV1().ConfigMaps("default").List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if firstRV == "" {
			firstRV = list.ResourceVersion
			// Writes between pages are not seen: the pages are a snapshot.
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-late"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		} else if list.ResourceVersion != firstRV {
			t.Fatalf("page %d at rv %s, first page at %s", pages, list.ResourceVersion, firstRV)
		}
		for _, it := range list.Items {
			names = append(names, it.Name)
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	if pages != 3 || len(names) != 25 || !sort.StringsAreSorted(names) {
		t.Fatalf("paging: %d pages, %d items (%v)", pages, len(names), names)
	}
	// Exact read at an old revision does not see later objects.
	old, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: firstRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil || len(old.Items) != 25 {
		t.Fatalf("exact list at %s: %v, %d items", firstRV, err, len(old.Items))
	}
	// resourceVersion=0 is served from the cache and is never older than a
	// write the client has already seen.
	any0, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || len(any0.Items) != 26 {
		t.Fatalf("rv=0 list: %v, %d items", err, len(any0.Items))
	}
	if _, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: "999999999", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}); err == nil {
		t.Fatal("a resourceVersion from the future must fail")
	}
	if _, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.bogus=1"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("unsupported field selector: got %v, want BadRequest", err)
	}
}

func TestWatchAndInformers(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client

	factory := informers.NewSharedInformerFactory(c, 0)
	svcInf := factory.Core().V1().Services().Informer()
	var mu sync.Mutex
	seen := map[string][]string{}
	_, _ = svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { mu.Lock(); seen["add"] = append(seen["add"], o.(*corev1.Service).Name); mu.Unlock() },
		UpdateFunc: func(_, o any) {
			mu.Lock()
			seen["update"] = append(seen["update"], o.(*corev1.Service).Name)
			mu.Unlock()
		},
		DeleteFunc: func(o any) {
			if s, ok := o.(*corev1.Service); ok {
				mu.Lock()
				seen["delete"] = append(seen["delete"], s.Name)
				mu.Unlock()
			}
		},
	})
	sliceInf := factory.Discovery().V1().EndpointSlices().Informer()
	nodeInf := factory.Core().V1().Nodes().Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced, nodeInf.HasSynced) {
		t.Fatal("informers did not sync")
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "watched"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Services("default").Patch(ctx, "watched", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Services("default").Delete(ctx, "watched", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "informer add/update/delete", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return contains(seen["add"], "watched") && contains(seen["update"], "watched") && contains(seen["delete"], "watched")
	})

	// A raw watch with a label selector sees an object leave its selection
	// as DELETED.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sel", Labels: map[string]string{"team": "net"}}}
	created, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{LabelSelector: "team=net", ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := c.CoreV1().ConfigMaps("default").Patch(ctx, "sel", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"other"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Deleted {
			t.Fatalf("selector transition: got %s, want DELETED", ev.Type)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for selector transition")
	}
}

func TestWatchBookmarksAndTimeout(t *testing.T) {
	ts := startServer(t, func(c *apiserver.Config) { c.BookmarkInterval = 200 * time.Millisecond })
	ctx := ctxT(t)
	list, err := ts.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Writes elsewhere advance the revision; a nodes watcher learns it from
	// a bookmark.
	if _, err := ts.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bump"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := ts.client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true, TimeoutSeconds: ptr(int64(3))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	gotBookmark := false
	start := time.Now()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Bookmark {
			n := ev.Object.(*corev1.Node)
			if n.ResourceVersion <= list.ResourceVersion && len(n.ResourceVersion) <= len(list.ResourceVersion) {
				t.Fatalf("bookmark rv %s not newer than %s", n.ResourceVersion, list.ResourceVersion)
			}
			gotBookmark = true
		}
	}
	if !gotBookmark {
		t.Fatal("no bookmark")
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("watch with timeoutSeconds=3 lasted %v", el)
	}
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
