package apiserver_test

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// TestNodeStatusPatchKeepsAnnotations makes exactly upstream flanneld's
// request (kube subnet manager, AcquireLease): a two-way strategic merge
// patch of the node's annotations, sent to nodes/<name>/status. The
// annotations must be stored; a spec change in the same patch is reset.
func TestNodeStatusPatchKeepsAnnotations(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "flannel-node"},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.3.0/24", PodCIDRs: []string{"10.244.3.0/24"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldData, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"flannel.alpha.coreos.com/backend-type":        "vxlan",
		"flannel.alpha.coreos.com/backend-data":        `{"VNI":1,"VtepMAC":"aa:bb:cc:dd:ee:ff"}`,
		"flannel.alpha.coreos.com/kube-subnet-manager": "true",
		"flannel.alpha.coreos.com/public-ip":           "192.168.0.10",
	}
	n.Annotations = map[string]string{}
	for k, v := range want {
		n.Annotations[k] = v
	}
	n.Spec.Unschedulable = true // must not pass through the status subresource
	newData, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, corev1.Node{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.CoreV1().Nodes().Patch(ctx, "flannel-node", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("patch nodes/status: %v", err)
	}
	stored, err := c.CoreV1().Nodes().Get(ctx, "flannel-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []*corev1.Node{got, stored} {
		if !reflect.DeepEqual(obj.Annotations, want) {
			t.Errorf("annotations after nodes/status patch = %v, want %v", obj.Annotations, want)
		}
		if obj.Spec.Unschedulable || obj.Spec.PodCIDR != "10.244.3.0/24" {
			t.Errorf("spec after nodes/status patch = %+v, want the stored spec", obj.Spec)
		}
	}
}

// TestNodeUpdateStatusKeepsLabels: a kubelet-style UpdateStatus carrying
// label changes stores them with the status; the spec stays.
func TestNodeUpdateStatusKeepsLabels(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "kubelet-node", Labels: map[string]string{"old": "x"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{"kubernetes.io/hostname": "kubelet-node", "node.kubernetes.io/instance-type": "vm"}
	n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.11"}}
	n.Status.NodeInfo.KubeletVersion = "v1.0.0-test"
	got, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update nodes/status: %v", err)
	}
	stored, err := c.CoreV1().Nodes().Get(ctx, "kubelet-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []*corev1.Node{got, stored} {
		if !reflect.DeepEqual(obj.Labels, n.Labels) {
			t.Errorf("labels = %v, want %v", obj.Labels, n.Labels)
		}
		if len(obj.Spec.Taints) != 0 {
			t.Errorf("spec.taints = %v, want the stored (none)", obj.Spec.Taints)
		}
		if len(obj.Status.Addresses) != 1 || obj.Status.NodeInfo.KubeletVersion != "v1.0.0-test" {
			t.Errorf("status not stored: %+v", obj.Status)
		}
	}
}

// TestPodStatusStrategy: pods/status keeps the client's labels and
// annotations and its status, but the spec and ownerReferences stay as
// stored, and an unset qosClass keeps the stored one (kube-apiserver's
// podStatusStrategy); a deletionTimestamp sent with it is ignored. A pod
// update, in turn, keeps the stored status.
func TestPodStatusStrategy(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "1234"}
	p, err := c.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "echo"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.QOSClass = corev1.PodQOSBestEffort
	if p, err = c.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	p.Labels = map[string]string{"app": "web", "pod-template-hash": "abc"}
	p.Annotations = map[string]string{"note": "from kubelet"}
	p.OwnerReferences = nil
	p.DeletionTimestamp = ptr(metav1.Now()) // only a delete may set it
	p.Spec.ActiveDeadlineSeconds = ptr(int64(5))
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = "10.244.0.5"
	p.Status.QOSClass = ""
	got, err := c.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update pods/status: %v", err)
	}
	stored, err := c.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []*corev1.Pod{got, stored} {
		if !reflect.DeepEqual(obj.Labels, p.Labels) || !reflect.DeepEqual(obj.Annotations, p.Annotations) {
			t.Errorf("metadata = %v %v, want %v %v", obj.Labels, obj.Annotations, p.Labels, p.Annotations)
		}
		if !reflect.DeepEqual(obj.OwnerReferences, []metav1.OwnerReference{owner}) {
			t.Errorf("ownerReferences = %v, want the stored %v", obj.OwnerReferences, owner)
		}
		if obj.DeletionTimestamp != nil {
			t.Errorf("deletionTimestamp = %v, want the stored (unset)", obj.DeletionTimestamp)
		}
		if obj.Spec.ActiveDeadlineSeconds != nil {
			t.Errorf("spec.activeDeadlineSeconds = %d, want the stored (unset)", *obj.Spec.ActiveDeadlineSeconds)
		}
		if obj.Status.Phase != corev1.PodRunning || obj.Status.PodIP != "10.244.0.5" || obj.Status.QOSClass != corev1.PodQOSBestEffort {
			t.Errorf("status = %+v, want Running, 10.244.0.5, the stored qosClass", obj.Status)
		}
	}

	// The main resource keeps the stored status and takes the metadata.
	stored.Status.Phase = corev1.PodFailed
	stored.Labels["extra"] = "1"
	upd, err := c.CoreV1().Pods("default").Update(ctx, stored, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if upd.Status.Phase != corev1.PodRunning || upd.Labels["extra"] != "1" {
		t.Errorf("pod update: phase %q labels %v, want the stored Running and the new label", upd.Status.Phase, upd.Labels)
	}
	patched, err := c.CoreV1().Pods("default").Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"patched":"yes"}},"status":{"phase":"Succeeded"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if patched.Status.Phase != corev1.PodRunning || patched.Labels["patched"] != "yes" {
		t.Errorf("pod patch: phase %q labels %v, want the stored Running and the new label", patched.Status.Phase, patched.Labels)
	}
}

// TestServiceAndNamespaceStatusKeepMetadata: services/status and
// namespaces/status store annotation changes and reset the spec.
func TestServiceAndNamespaceStatusKeepMetadata(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	c := ts.client
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{"lb.example/assigned": "true"}
	svc.Spec.Ports[0].Port = 81
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
	got, err := c.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update services/status: %v", err)
	}
	if got.Annotations["lb.example/assigned"] != "true" || got.Spec.Ports[0].Port != 80 || len(got.Status.LoadBalancer.Ingress) != 1 {
		t.Errorf("services/status: annotations %v, port %d, ingress %v; want annotation kept, port 80, one ingress",
			got.Annotations, got.Spec.Ports[0].Port, got.Status.LoadBalancer.Ingress)
	}

	ns, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "st"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"team": "net"}
	ns.Spec.Finalizers = nil
	gotNS, err := c.CoreV1().Namespaces().UpdateStatus(ctx, ns, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update namespaces/status: %v", err)
	}
	if gotNS.Labels["team"] != "net" || len(gotNS.Spec.Finalizers) != 1 {
		t.Errorf("namespaces/status: labels %v finalizers %v; want the label kept and the stored finalizer", gotNS.Labels, gotNS.Spec.Finalizers)
	}
}
