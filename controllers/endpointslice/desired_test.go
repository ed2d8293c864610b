package endpointslice

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestResolvePorts(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "web", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
		{Name: "dns", Port: 53, TargetPort: intstr.FromString("dns"), Protocol: corev1.ProtocolUDP},
		{Name: "admin", Port: 9000}, // targetPort unset: same as port
		{Name: "sidecar", Port: 15000, TargetPort: intstr.FromString("proxy"), Protocol: corev1.ProtocolTCP},
	}}}
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{
			{Name: "a", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
			{Name: "b", Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolTCP}}},
		},
		InitContainers: []corev1.Container{
			{Name: "init", Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 1, Protocol: corev1.ProtocolUDP}}},
			{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001}}},
		},
	}}
	got := portsKey(resolvePorts(svc, pod))
	// dns is TCP in the pod and only a plain init container has it on UDP.
	want := "admin/TCP/9000/,sidecar/TCP/15001/,web/TCP/8080/,"
	if got != want {
		t.Errorf("ports %q, want %q", got, want)
	}
}

func TestServiceAddressTypes(t *testing.T) {
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	for _, tc := range []struct {
		spec corev1.ServiceSpec
		want []discoveryv1.AddressType
	}{
		{corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}}, []discoveryv1.AddressType{v6, v4}},
		{corev1.ServiceSpec{ClusterIP: "fd00::1"}, []discoveryv1.AddressType{v6}},
		{corev1.ServiceSpec{ClusterIP: "10.0.0.1"}, []discoveryv1.AddressType{v4}},
		{corev1.ServiceSpec{ClusterIP: "None"}, []discoveryv1.AddressType{v4, v6}},
	} {
		got := serviceAddressTypes(&corev1.Service{Spec: tc.spec})
		if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
			t.Errorf("%+v: %v, want %v", tc.spec, got, tc.want)
		}
	}
}

func TestPodChanged(t *testing.T) {
	base := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "1", Labels: map[string]string{"app": "a"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}},
	}
	mod := func(f func(p *corev1.Pod)) *corev1.Pod {
		p := base.DeepCopy()
		p.ResourceVersion = "2"
		f(p)
		return p
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"resync":           {base.DeepCopy(), false},
		"rv only":          {mod(func(*corev1.Pod) {}), false},
		"annotation":       {mod(func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }), false},
		"container status": {mod(func(p *corev1.Pod) { p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c"}} }), false},
		"other condition": {mod(func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
		}), false},
		"ready":       {mod(func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionTrue }), true},
		"labels":      {mod(func(p *corev1.Pod) { p.Labels["x"] = "y" }), true},
		"ip":          {mod(func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.2"; p.Status.PodIPs[0].IP = "10.0.0.2" }), true},
		"terminating": {mod(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }), true},
		"finished":    {mod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), true},
		"hostname":    {mod(func(p *corev1.Pod) { p.Spec.Hostname = "h" }), true},
	} {
		if got := podChanged(base, tc.pod); got != tc.want {
			t.Errorf("%s: podChanged %v, want %v", name, got, tc.want)
		}
	}
	// Without an IP before and after, nothing a slice shows can change.
	noIP := base.DeepCopy()
	noIP.Status.PodIP, noIP.Status.PodIPs = "", nil
	relabelled := noIP.DeepCopy()
	relabelled.ResourceVersion = "2"
	relabelled.Labels = map[string]string{"app": "b"}
	if podChanged(noIP, relabelled) {
		t.Error("relabel of a pod without IP counted as a change")
	}
}
