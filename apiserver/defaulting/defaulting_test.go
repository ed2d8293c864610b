package defaulting

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ptr[T any](v T) *T { return &v }

func TestService(t *testing.T) {
	tests := []struct {
		name  string
		in    corev1.Service
		check func(t *testing.T, s *corev1.Service)
	}{{
		name: "empty spec gets ClusterIP defaults",
		in:   corev1.Service{},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "type", s.Spec.Type, corev1.ServiceTypeClusterIP)
			eq(t, "sessionAffinity", s.Spec.SessionAffinity, corev1.ServiceAffinityNone)
			eq(t, "internalTrafficPolicy", deref(s.Spec.InternalTrafficPolicy), corev1.ServiceInternalTrafficPolicyCluster)
			eq(t, "ipFamilyPolicy", deref(s.Spec.IPFamilyPolicy), corev1.IPFamilyPolicySingleStack)
			eq(t, "externalTrafficPolicy", s.Spec.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicy(""))
			if s.Spec.AllocateLoadBalancerNodePorts != nil {
				t.Errorf("allocateLoadBalancerNodePorts set on ClusterIP service")
			}
		},
	}, {
		name: "port protocol and targetPort",
		in: corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "a", Port: 80},
			{Name: "b", Port: 81, TargetPort: intstr.FromString("")},
			{Name: "c", Port: 82, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolUDP},
			{Name: "d", Port: 83, TargetPort: intstr.FromInt32(8083)},
		}}},
		check: func(t *testing.T, s *corev1.Service) {
			p := s.Spec.Ports
			eq(t, "ports[0].protocol", p[0].Protocol, corev1.ProtocolTCP)
			eq(t, "ports[0].targetPort", p[0].TargetPort, intstr.FromInt32(80))
			eq(t, "ports[1].targetPort", p[1].TargetPort, intstr.FromInt32(81))
			eq(t, "ports[2].protocol", p[2].Protocol, corev1.ProtocolUDP)
			eq(t, "ports[2].targetPort", p[2].TargetPort, intstr.FromString("http"))
			eq(t, "ports[3].targetPort", p[3].TargetPort, intstr.FromInt32(8083))
		},
	}, {
		name: "ClientIP affinity gets default timeout",
		in:   corev1.Service{Spec: corev1.ServiceSpec{SessionAffinity: corev1.ServiceAffinityClientIP}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "timeoutSeconds", deref(s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds), int32(10800))
		},
	}, {
		name: "ClientIP affinity keeps explicit timeout",
		in: corev1.Service{Spec: corev1.ServiceSpec{
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}},
		}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "timeoutSeconds", deref(s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds), int32(60))
		},
	}, {
		name: "affinity None drops config",
		in: corev1.Service{Spec: corev1.ServiceSpec{
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}},
		}},
		check: func(t *testing.T, s *corev1.Service) {
			if s.Spec.SessionAffinityConfig != nil {
				t.Errorf("sessionAffinityConfig = %v, want nil", s.Spec.SessionAffinityConfig)
			}
		},
	}, {
		name: "NodePort gets externalTrafficPolicy Cluster",
		in:   corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "externalTrafficPolicy", s.Spec.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicyCluster)
			eq(t, "internalTrafficPolicy", deref(s.Spec.InternalTrafficPolicy), corev1.ServiceInternalTrafficPolicyCluster)
		},
	}, {
		name: "explicit externalTrafficPolicy Local is kept",
		in:   corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "externalTrafficPolicy", s.Spec.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicyLocal)
		},
	}, {
		name: "ClusterIP with externalIPs is externally accessible",
		in:   corev1.Service{Spec: corev1.ServiceSpec{ExternalIPs: []string{"192.0.2.10"}}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "externalTrafficPolicy", s.Spec.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicyCluster)
		},
	}, {
		name: "LoadBalancer defaults",
		in: corev1.Service{
			Spec:   corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}, {Hostname: "lb.example.com"}}}},
		},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "allocateLoadBalancerNodePorts", deref(s.Spec.AllocateLoadBalancerNodePorts), true)
			eq(t, "externalTrafficPolicy", s.Spec.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicyCluster)
			eq(t, "ingress[0].ipMode", deref(s.Status.LoadBalancer.Ingress[0].IPMode), corev1.LoadBalancerIPModeVIP)
			if s.Status.LoadBalancer.Ingress[1].IPMode != nil {
				t.Errorf("ipMode set on hostname-only ingress")
			}
		},
	}, {
		name: "LoadBalancer keeps allocateLoadBalancerNodePorts=false",
		in:   corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr(false)}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "allocateLoadBalancerNodePorts", deref(s.Spec.AllocateLoadBalancerNodePorts), false)
		},
	}, {
		name: "ExternalName gets neither traffic nor family policy",
		in:   corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
		check: func(t *testing.T, s *corev1.Service) {
			if s.Spec.InternalTrafficPolicy != nil || s.Spec.IPFamilyPolicy != nil || s.Spec.ExternalTrafficPolicy != "" {
				t.Errorf("ExternalName service got policies: %+v", s.Spec)
			}
		},
	}, {
		name: "headless without selector is RequireDualStack",
		in:   corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "ipFamilyPolicy", deref(s.Spec.IPFamilyPolicy), corev1.IPFamilyPolicyRequireDualStack)
			eq(t, "clusterIPs", s.Spec.ClusterIPs, []string{corev1.ClusterIPNone})
		},
	}, {
		name: "headless with selector is SingleStack",
		in:   corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"a": "b"}}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "ipFamilyPolicy", deref(s.Spec.IPFamilyPolicy), corev1.IPFamilyPolicySingleStack)
		},
	}, {
		name: "explicit ipFamilyPolicy is kept",
		in:   corev1.Service{Spec: corev1.ServiceSpec{IPFamilyPolicy: ptr(corev1.IPFamilyPolicyPreferDualStack)}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "ipFamilyPolicy", deref(s.Spec.IPFamilyPolicy), corev1.IPFamilyPolicyPreferDualStack)
		},
	}, {
		name: "clusterIP is mirrored into clusterIPs, not the other way",
		in:   corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10"}},
		check: func(t *testing.T, s *corev1.Service) {
			eq(t, "clusterIPs", s.Spec.ClusterIPs, []string{"10.96.0.10"})
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.in.DeepCopy()
			Service(s)
			tc.check(t, s)
			again := s.DeepCopy()
			Service(again)
			if !apiequality.Semantic.DeepEqual(s, again) {
				t.Errorf("Service defaulting is not idempotent")
			}
		})
	}
}

func TestServiceClusterIPsNotFilledFromPlural(t *testing.T) {
	s := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIPs: []string{"10.96.0.10"}}}
	Service(s)
	eq(t, "clusterIP", s.Spec.ClusterIP, "")
}

func TestPod(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:  "app",
			Image: "nginx:1.27",
			Ports: []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)},
			}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}},
				PeriodSeconds: 3,
			},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		}},
		InitContainers: []corev1.Container{{Name: "init", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: 9000}}}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox:latest",
		}}},
	}}
	Pod(p)

	s := p.Spec
	eq(t, "restartPolicy", s.RestartPolicy, corev1.RestartPolicyAlways)
	eq(t, "dnsPolicy", s.DNSPolicy, corev1.DNSClusterFirst)
	eq(t, "schedulerName", s.SchedulerName, "default-scheduler")
	eq(t, "terminationGracePeriodSeconds", deref(s.TerminationGracePeriodSeconds), int64(30))
	eq(t, "enableServiceLinks", deref(s.EnableServiceLinks), true)
	if s.SecurityContext == nil {
		t.Errorf("securityContext not defaulted")
	}
	c := s.Containers[0]
	eq(t, "ports[0].protocol", c.Ports[0].Protocol, corev1.ProtocolTCP)
	eq(t, "ports[1].protocol", c.Ports[1].Protocol, corev1.ProtocolUDP)
	eq(t, "ports[0].hostPort (no hostNetwork)", c.Ports[0].HostPort, int32(0))
	eq(t, "imagePullPolicy", c.ImagePullPolicy, corev1.PullIfNotPresent)
	eq(t, "terminationMessagePath", c.TerminationMessagePath, "/dev/termination-log")
	eq(t, "terminationMessagePolicy", c.TerminationMessagePolicy, corev1.TerminationMessageReadFile)
	eq(t, "liveness", [4]int32{c.LivenessProbe.TimeoutSeconds, c.LivenessProbe.PeriodSeconds, c.LivenessProbe.SuccessThreshold, c.LivenessProbe.FailureThreshold}, [4]int32{1, 10, 1, 3})
	eq(t, "readiness periodSeconds (explicit)", c.ReadinessProbe.PeriodSeconds, int32(3))
	eq(t, "httpGet.path", c.LivenessProbe.HTTPGet.Path, "/")
	eq(t, "httpGet.scheme", c.LivenessProbe.HTTPGet.Scheme, corev1.URISchemeHTTP)
	eq(t, "requests from limits", c.Resources.Requests.Cpu().String(), "1")
	eq(t, "initContainers[0].ports[0].protocol", s.InitContainers[0].Ports[0].Protocol, corev1.ProtocolTCP)
	eq(t, "initContainers[0].imagePullPolicy", s.InitContainers[0].ImagePullPolicy, corev1.PullAlways)
	eq(t, "ephemeralContainers[0].imagePullPolicy", s.EphemeralContainers[0].ImagePullPolicy, corev1.PullAlways)
	eq(t, "ephemeralContainers[0].terminationMessagePolicy", s.EphemeralContainers[0].TerminationMessagePolicy, corev1.TerminationMessageReadFile)
	eq(t, "status.phase", p.Status.Phase, corev1.PodPending)

	want := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
	}
	eq(t, "tolerations", s.Tolerations, want)

	again := p.DeepCopy()
	Pod(again)
	if !apiequality.Semantic.DeepEqual(p, again) {
		t.Errorf("Pod defaulting is not idempotent")
	}
}

func TestPodHostNetworkPorts(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{
		Name: "app", Image: "app:1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 9090, HostPort: 9090}},
	}}}}
	Pod(p)
	eq(t, "ports[0].hostPort", p.Spec.Containers[0].Ports[0].HostPort, int32(8080))
	eq(t, "ports[1].hostPort", p.Spec.Containers[0].Ports[1].HostPort, int32(9090))
}

func TestPodKeepsPhase(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	Pod(p)
	eq(t, "status.phase", p.Status.Phase, corev1.PodRunning)
}

func TestPodIPPairing(t *testing.T) {
	tests := []struct {
		name       string
		in         corev1.PodStatus
		wantPodIP  string
		wantPodIPs []corev1.PodIP
	}{
		{"singular fills plural", corev1.PodStatus{PodIP: "10.0.0.5"}, "10.0.0.5", []corev1.PodIP{{IP: "10.0.0.5"}}},
		{"plural fills singular", corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "fd00::5"}, {IP: "10.0.0.5"}}}, "fd00::5", []corev1.PodIP{{IP: "fd00::5"}, {IP: "10.0.0.5"}}},
		{"conflict left for validation", corev1.PodStatus{PodIP: "10.0.0.6", PodIPs: []corev1.PodIP{{IP: "10.0.0.5"}}}, "10.0.0.6", []corev1.PodIP{{IP: "10.0.0.5"}}},
		{"neither", corev1.PodStatus{}, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Status: tc.in}
			Pod(p)
			eq(t, "podIP", p.Status.PodIP, tc.wantPodIP)
			eq(t, "podIPs", p.Status.PodIPs, tc.wantPodIPs)
		})
	}
	p := &corev1.Pod{Status: corev1.PodStatus{HostIP: "192.0.2.1"}}
	Pod(p)
	eq(t, "hostIPs", p.Status.HostIPs, []corev1.HostIP{{IP: "192.0.2.1"}})
}

func TestDefaultPullPolicy(t *testing.T) {
	tests := []struct {
		image string
		want  corev1.PullPolicy
	}{
		{"nginx", corev1.PullAlways},
		{"nginx:latest", corev1.PullAlways},
		{"nginx:1.27", corev1.PullIfNotPresent},
		{"registry.local:5000/nginx", corev1.PullAlways},
		{"registry.local:5000/team/nginx:1.27", corev1.PullIfNotPresent},
		{"nginx@sha256:0000000000000000000000000000000000000000000000000000000000000000", corev1.PullIfNotPresent},
		{"nginx:latest@sha256:0000000000000000000000000000000000000000000000000000000000000000", corev1.PullAlways},
		{"", corev1.PullIfNotPresent},
	}
	for _, tc := range tests {
		if got := defaultPullPolicy(tc.image); got != tc.want {
			t.Errorf("defaultPullPolicy(%q) = %s, want %s", tc.image, got, tc.want)
		}
	}
}

func TestPodTolerations(t *testing.T) {
	noExecNotReady := corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(60))}
	tests := []struct {
		name     string
		in       []corev1.Toleration
		wantKeys []string
	}{
		{"none", nil, []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}},
		{"own not-ready toleration is kept, unreachable added", []corev1.Toleration{noExecNotReady}, []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}},
		{"tolerate everything", []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, []string{""}},
		{"NoSchedule toleration does not count", []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			[]string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.in}}
			Pod(p)
			var keys []string
			for _, tol := range p.Spec.Tolerations {
				keys = append(keys, tol.Key)
			}
			eq(t, "toleration keys", keys, tc.wantKeys)
			if len(tc.in) > 0 {
				eq(t, "first toleration unchanged", p.Spec.Tolerations[0], tc.in[0])
			}
		})
	}
}

func TestNode(t *testing.T) {
	n := &corev1.Node{
		Spec:   corev1.NodeSpec{PodCIDR: "10.244.1.0/24"},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}},
	}
	Node(n)
	eq(t, "podCIDRs", n.Spec.PodCIDRs, []string{"10.244.1.0/24"})
	eq(t, "allocatable pods", n.Status.Allocatable.Pods().String(), "110")

	n = &corev1.Node{Spec: corev1.NodeSpec{PodCIDRs: []string{"fd00:1::/64", "10.244.1.0/24"}}}
	Node(n)
	eq(t, "podCIDR", n.Spec.PodCIDR, "fd00:1::/64")
	if n.Status.Allocatable != nil {
		t.Errorf("allocatable set without capacity")
	}

	n = &corev1.Node{Status: corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
		Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("100")},
	}}
	Node(n)
	eq(t, "explicit allocatable", n.Status.Allocatable.Pods().String(), "100")
}

func TestEndpointSlice(t *testing.T) {
	ready := true
	s := &discoveryv1.EndpointSlice{
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}, {Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports: []discoveryv1.EndpointPort{
			{Port: ptr(int32(80))},
			{Name: ptr("dns"), Port: ptr(int32(53)), Protocol: ptr(corev1.ProtocolUDP)},
		},
	}
	EndpointSlice(s)
	eq(t, "ports[0].protocol", deref(s.Ports[0].Protocol), corev1.ProtocolTCP)
	eq(t, "ports[0].name", deref(s.Ports[0].Name), "")
	eq(t, "ports[1].protocol", deref(s.Ports[1].Protocol), corev1.ProtocolUDP)
	eq(t, "ports[1].name", deref(s.Ports[1].Name), "dns")
	if c := s.Endpoints[0].Conditions; c.Ready != nil || c.Serving != nil || c.Terminating != nil {
		t.Errorf("endpoint conditions defaulted: %+v", c)
	}
	eq(t, "endpoints[1].conditions.ready", deref(s.Endpoints[1].Conditions.Ready), true)
}

func TestNamespace(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"env": "prod"}}}
	Namespace(ns)
	eq(t, "labels", ns.Labels, map[string]string{"env": "prod", corev1.LabelMetadataName: "team-a"})
	eq(t, "finalizers", ns.Spec.Finalizers, []corev1.FinalizerName{corev1.FinalizerKubernetes})
	eq(t, "phase", ns.Status.Phase, corev1.NamespaceActive)

	// The label follows the name even if a client sent something else.
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Labels: map[string]string{corev1.LabelMetadataName: "spoofed"}}}
	Namespace(ns)
	eq(t, "label", ns.Labels[corev1.LabelMetadataName], "team-b")

	// generateName: nothing to label yet.
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tmp-"}}
	Namespace(ns)
	if ns.Labels != nil {
		t.Errorf("labels = %v, want nil", ns.Labels)
	}

	// Other finalizers are kept; "kubernetes" added once.
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"example.com/cleanup"}}}
	Namespace(ns)
	Namespace(ns)
	eq(t, "finalizers", ns.Spec.Finalizers, []corev1.FinalizerName{"example.com/cleanup", corev1.FinalizerKubernetes})

	// A namespace being deleted must not get the finalizer back.
	now := metav1.Now()
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "d", DeletionTimestamp: &now}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	Namespace(ns)
	if len(ns.Spec.Finalizers) != 0 {
		t.Errorf("finalizers = %v on a terminating namespace", ns.Spec.Finalizers)
	}
	eq(t, "phase", ns.Status.Phase, corev1.NamespaceTerminating)
}

func TestConfigMap(t *testing.T) {
	c := &corev1.ConfigMap{}
	ConfigMap(c)
	if c.Data == nil {
		t.Errorf("data is nil")
	}
	c = &corev1.ConfigMap{Data: map[string]string{"a": "b"}}
	ConfigMap(c)
	eq(t, "data", c.Data, map[string]string{"a": "b"})
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", what, got, want)
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
