package validation_test

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodenet/nodenet/apiserver/defaulting"
	"github.com/nodenet/nodenet/apiserver/validation"
)

// testCase is one validation call and the error it must produce. An empty
// field means the object is valid and no error at all may be returned.
// Otherwise the list must contain an error with exactly that field path and
// type (other errors may accompany it: upstream often reports one mistake
// from several angles).
type testCase struct {
	name      string
	errs      func() field.ErrorList
	wantField string
	wantType  field.ErrorType
}

func run(t *testing.T, tests []testCase) {
	t.Helper()
	seen := map[string]bool{}
	for _, tc := range tests {
		if seen[tc.name] {
			t.Fatalf("duplicate test name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.errs()
			if tc.wantField == "" {
				if len(errs) != 0 {
					t.Fatalf("expected no errors, got:\n%s", dump(errs))
				}
				return
			}
			for _, e := range errs {
				if e.Field == tc.wantField && e.Type == tc.wantType {
					return
				}
			}
			t.Fatalf("expected %s error at %q, got:\n%s", tc.wantType, tc.wantField, dump(errs))
		})
	}
}

func dump(errs field.ErrorList) string {
	if len(errs) == 0 {
		return "  (none)"
	}
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("  " + e.Type.String() + " " + e.Field + ": " + e.Error() + "\n")
	}
	return b.String()
}

func ptr[T any](v T) *T { return &v }

const (
	invalid      = field.ErrorTypeInvalid
	required     = field.ErrorTypeRequired
	notSupported = field.ErrorTypeNotSupported
	duplicate    = field.ErrorTypeDuplicate
	forbidden    = field.ErrorTypeForbidden
	tooMany      = field.ErrorTypeTooMany
	tooLong      = field.ErrorTypeTooLong
)

// withRV returns a copy that looks like the stored object a client read and
// sends back for an update.
func withRV[T interface{ SetResourceVersion(string) }](obj T) T {
	obj.SetResourceVersion("42")
	return obj
}

// ---------------------------------------------------------------- Service

// svc builds a defaulted ClusterIP service; pre runs before defaulting (what
// a client sends), the caller can mutate the result afterwards to produce
// states defaulting would never leave behind.
func svc(pre func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Selector:  map[string]string{"app": "web"},
			ClusterIP: "10.96.0.10",
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	if pre != nil {
		pre(s)
	}
	defaulting.Service(s)
	return s
}

func svcErrs(pre, post func(*corev1.Service)) func() field.ErrorList {
	return func() field.ErrorList {
		s := svc(pre)
		if post != nil {
			post(s)
		}
		return validation.Service(s)
	}
}

func nodePortSvc(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = 30080
}

func lbLocalSvc(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeLoadBalancer
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	s.Spec.HealthCheckNodePort = 32000
	s.Spec.Ports[0].NodePort = 30080
}

func dualStackSvc(s *corev1.Service) {
	s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"}
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
}

func externalNameSvc(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeExternalName
	s.Spec.ExternalName = "db.example.com"
	s.Spec.ClusterIP = ""
	s.Spec.Selector = nil
	s.Spec.Ports = nil
}

func twoPorts(s *corev1.Service) {
	s.Spec.Ports = []corev1.ServicePort{
		{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)},
	}
}

func TestService(t *testing.T) {
	run(t, []testCase{
		{name: "valid ClusterIP", errs: svcErrs(nil, nil)},
		{name: "valid unallocated ClusterIP", errs: svcErrs(func(s *corev1.Service) { s.Spec.ClusterIP = "" }, nil)},
		{name: "valid NodePort", errs: svcErrs(nodePortSvc, nil)},
		{name: "valid LoadBalancer Local", errs: svcErrs(lbLocalSvc, nil)},
		{name: "valid headless without ports", errs: svcErrs(func(s *corev1.Service) { s.Spec.ClusterIP = "None"; s.Spec.Ports = nil }, nil)},
		{name: "valid ExternalName", errs: svcErrs(externalNameSvc, nil)},
		{name: "valid ExternalName with clusterIP None and trailing dot", errs: svcErrs(func(s *corev1.Service) {
			externalNameSvc(s)
			s.Spec.ClusterIP = "None"
			s.Spec.ExternalName = "db.example.com."
		}, nil)},
		{name: "valid dual-stack", errs: svcErrs(dualStackSvc, nil)},
		{name: "valid same port on two protocols", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53}, {Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP}}
			s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
		}, nil)},
		{name: "valid same nodePort on two protocols", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, NodePort: 30053},
			}
		}, nil)},
		{name: "valid ClientIP affinity at max timeout", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(86400))}}
		}, nil)},
		{name: "valid trafficDistribution PreferSameNode", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.TrafficDistribution = ptr(corev1.ServiceTrafficDistributionPreferSameNode)
		}, nil)},
		{name: "valid externalIPs and externalTrafficPolicy on ClusterIP", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"192.0.2.10"}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}, nil)},
		{name: "valid LoadBalancer extras", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerIP = "192.0.2.20"
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24", " 2001:db8::/32 "}
			s.Spec.LoadBalancerClass = ptr("example.com/lb")
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.20"}, {Hostname: "lb.example.com"}}
		}, nil)},

		{name: "name not a DNS-1035 label (uppercase)", errs: svcErrs(func(s *corev1.Service) { s.Name = "Web" }, nil), wantField: "metadata.name", wantType: invalid},
		{name: "name not a DNS-1035 label (leading digit)", errs: svcErrs(func(s *corev1.Service) { s.Name = "1web" }, nil), wantField: "metadata.name", wantType: invalid},
		{name: "namespace missing", errs: svcErrs(func(s *corev1.Service) { s.Namespace = "" }, nil), wantField: "metadata.namespace", wantType: required},
		{name: "unknown type", errs: svcErrs(func(s *corev1.Service) { s.Spec.Type = "Magic" }, nil), wantField: "spec.type", wantType: notSupported},
		{name: "type missing", errs: svcErrs(nil, func(s *corev1.Service) { s.Spec.Type = "" }), wantField: "spec.type", wantType: required},
		{name: "no ports", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports = nil }, nil), wantField: "spec.ports", wantType: required},
		{name: "port 0", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports[0].Port = 0 }, nil), wantField: "spec.ports[0].port", wantType: invalid},
		{name: "port 65536", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports[0].Port = 65536 }, nil), wantField: "spec.ports[0].port", wantType: invalid},
		{name: "protocol unsupported", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }, nil), wantField: "spec.ports[0].protocol", wantType: notSupported},
		{name: "protocol missing", errs: svcErrs(nil, func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "" }), wantField: "spec.ports[0].protocol", wantType: required},
		{name: "port name required with several ports", errs: svcErrs(func(s *corev1.Service) { twoPorts(s); s.Spec.Ports[1].Name = "" }, nil), wantField: "spec.ports[1].name", wantType: required},
		{name: "port name not a DNS label", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports[0].Name = "HTTP" }, nil), wantField: "spec.ports[0].name", wantType: invalid},
		{name: "port name duplicate", errs: svcErrs(func(s *corev1.Service) { twoPorts(s); s.Spec.Ports[1].Name = "http" }, nil), wantField: "spec.ports[1].name", wantType: duplicate},
		{name: "port and protocol duplicate", errs: svcErrs(func(s *corev1.Service) { twoPorts(s); s.Spec.Ports[1].Port = 80 }, nil), wantField: "spec.ports[1]", wantType: duplicate},
		{name: "targetPort 0", errs: svcErrs(nil, func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(0) }), wantField: "spec.ports[0].targetPort", wantType: invalid},
		{name: "targetPort too large", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(65536) }, nil), wantField: "spec.ports[0].targetPort", wantType: invalid},
		{name: "targetPort bad name", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http_alt") }, nil), wantField: "spec.ports[0].targetPort", wantType: invalid},
		{name: "targetPort name too long", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("a-very-long-port-name") }, nil), wantField: "spec.ports[0].targetPort", wantType: invalid},
		{name: "appProtocol invalid", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports[0].AppProtocol = ptr("not a name") }, nil), wantField: "spec.ports[0].appProtocol", wantType: invalid},
		{name: "nodePort on ClusterIP", errs: svcErrs(func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30080 }, nil), wantField: "spec.ports[0].nodePort", wantType: forbidden},
		{name: "nodePort on ExternalName", errs: svcErrs(func(s *corev1.Service) {
			externalNameSvc(s)
			s.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}}
		}, nil), wantField: "spec.ports[0].nodePort", wantType: forbidden},
		{name: "nodePort out of range", errs: svcErrs(func(s *corev1.Service) { nodePortSvc(s); s.Spec.Ports[0].NodePort = 70000 }, nil), wantField: "spec.ports[0].nodePort", wantType: invalid},
		{name: "nodePort duplicate", errs: svcErrs(func(s *corev1.Service) {
			twoPorts(s)
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort, s.Spec.Ports[1].NodePort = 30080, 30080
		}, nil), wantField: "spec.ports[1].nodePort", wantType: duplicate},
		{name: "selector invalid", errs: svcErrs(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "not valid!"} }, nil), wantField: "spec.selector", wantType: invalid},
		{name: "clusterIP not an IP", errs: svcErrs(func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0.300" }, nil), wantField: "spec.clusterIP", wantType: invalid},
		{name: "clusterIP with leading zeros", errs: svcErrs(func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0.010" }, nil), wantField: "spec.clusterIP", wantType: invalid},
		{name: "clusterIPs[0] differs from clusterIP", errs: svcErrs(func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.11"} }, nil), wantField: "spec.clusterIPs", wantType: invalid},
		{name: "clusterIPs without clusterIP", errs: svcErrs(func(s *corev1.Service) { s.Spec.ClusterIP = ""; s.Spec.ClusterIPs = []string{"10.96.0.10"} }, nil), wantField: "spec.clusterIPs", wantType: invalid},
		{name: "clusterIPs missing", errs: svcErrs(nil, func(s *corev1.Service) { s.Spec.ClusterIPs = nil }), wantField: "spec.clusterIPs", wantType: required},
		{name: "clusterIPs entry invalid", errs: svcErrs(func(s *corev1.Service) {
			dualStackSvc(s)
			s.Spec.ClusterIPs[1] = "fd00::zz"
		}, nil), wantField: "spec.clusterIPs[1]", wantType: invalid},
		{name: "clusterIPs more than two", errs: svcErrs(func(s *corev1.Service) {
			dualStackSvc(s)
			s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, "10.96.0.11")
		}, nil), wantField: "spec.clusterIPs", wantType: invalid},
		{name: "clusterIPs same family", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.ClusterIPs = []string{"10.96.0.10", "10.96.0.11"}
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
		}, nil), wantField: "spec.clusterIPs", wantType: invalid},
		{name: "clusterIPs None not alone", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.ClusterIP = "None"
			s.Spec.ClusterIPs = []string{"None", "fd00::10"}
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
		}, nil), wantField: "spec.clusterIPs", wantType: invalid},
		{name: "clusterIP does not match ipFamilies", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		}, nil), wantField: "spec.clusterIPs[0]", wantType: invalid},
		{name: "ipFamilies unsupported", errs: svcErrs(func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{"IPv5"} }, nil), wantField: "spec.ipFamilies[0]", wantType: notSupported},
		{name: "ipFamilies duplicate", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv4Protocol}
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyPreferDualStack)
		}, nil), wantField: "spec.ipFamilies[1]", wantType: duplicate},
		{name: "ipFamilies more than two", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol, corev1.IPv4Protocol}
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyPreferDualStack)
		}, nil), wantField: "spec.ipFamilies", wantType: invalid},
		{name: "ipFamilyPolicy unsupported", errs: svcErrs(func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicy("DualStack")) }, nil), wantField: "spec.ipFamilyPolicy", wantType: notSupported},
		{name: "SingleStack with two families", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} // no policy: defaulted to SingleStack
		}, nil), wantField: "spec.ipFamilyPolicy", wantType: invalid},
		{name: "SingleStack with two clusterIPs", errs: svcErrs(func(s *corev1.Service) {
			dualStackSvc(s)
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		}, nil), wantField: "spec.ipFamilyPolicy", wantType: invalid},
		{name: "externalIP invalid", errs: svcErrs(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2"} }, nil), wantField: "spec.externalIPs[0]", wantType: invalid},
		{name: "externalIP loopback", errs: svcErrs(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"127.0.0.1"} }, nil), wantField: "spec.externalIPs[0]", wantType: invalid},
		{name: "loadBalancerIP invalid", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerIP = "lb.example.com"
		}, nil), wantField: "spec.loadBalancerIP", wantType: invalid},
		{name: "loadBalancerSourceRanges not a CIDR", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/33"}
		}, nil), wantField: "spec.loadBalancerSourceRanges[0]", wantType: invalid},
		{name: "loadBalancerSourceRanges with host bits", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.1/24"}
		}, nil), wantField: "spec.loadBalancerSourceRanges[0]", wantType: invalid},
		{name: "loadBalancerSourceRanges on ClusterIP", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
		}, nil), wantField: "spec.loadBalancerSourceRanges", wantType: forbidden},
		{name: "allocateLoadBalancerNodePorts on ClusterIP", errs: svcErrs(func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = ptr(true) }, nil), wantField: "spec.allocateLoadBalancerNodePorts", wantType: forbidden},
		{name: "allocateLoadBalancerNodePorts missing on LoadBalancer", errs: svcErrs(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }, func(s *corev1.Service) {
			s.Spec.AllocateLoadBalancerNodePorts = nil
		}), wantField: "spec.allocateLoadBalancerNodePorts", wantType: required},
		{name: "loadBalancerClass on ClusterIP", errs: svcErrs(func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/lb") }, nil), wantField: "spec.loadBalancerClass", wantType: forbidden},
		{name: "externalTrafficPolicy on ClusterIP", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}, nil), wantField: "spec.externalTrafficPolicy", wantType: invalid},
		{name: "externalTrafficPolicy unsupported", errs: svcErrs(func(s *corev1.Service) {
			nodePortSvc(s)
			s.Spec.ExternalTrafficPolicy = "Global"
		}, nil), wantField: "spec.externalTrafficPolicy", wantType: notSupported},
		{name: "externalTrafficPolicy missing on NodePort", errs: svcErrs(nodePortSvc, func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = ""
		}), wantField: "spec.externalTrafficPolicy", wantType: required},
		{name: "internalTrafficPolicy unsupported", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicy("Node"))
		}, nil), wantField: "spec.internalTrafficPolicy", wantType: notSupported},
		{name: "internalTrafficPolicy missing", errs: svcErrs(nil, func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = nil }), wantField: "spec.internalTrafficPolicy", wantType: required},
		{name: "healthCheckNodePort without Local", errs: svcErrs(func(s *corev1.Service) {
			lbLocalSvc(s)
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}, nil), wantField: "spec.healthCheckNodePort", wantType: invalid},
		{name: "healthCheckNodePort on NodePort", errs: svcErrs(func(s *corev1.Service) {
			nodePortSvc(s)
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 32000
		}, nil), wantField: "spec.healthCheckNodePort", wantType: invalid},
		{name: "healthCheckNodePort out of range", errs: svcErrs(func(s *corev1.Service) {
			lbLocalSvc(s)
			s.Spec.HealthCheckNodePort = 70000
		}, nil), wantField: "spec.healthCheckNodePort", wantType: invalid},
		{name: "sessionAffinity unsupported", errs: svcErrs(func(s *corev1.Service) { s.Spec.SessionAffinity = "Sticky" }, nil), wantField: "spec.sessionAffinity", wantType: notSupported},
		{name: "ClientIP timeout 0", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(0))}}
		}, nil), wantField: "spec.sessionAffinityConfig.clientIP.timeoutSeconds", wantType: invalid},
		{name: "ClientIP timeout above one day", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(86401))}}
		}, nil), wantField: "spec.sessionAffinityConfig.clientIP.timeoutSeconds", wantType: invalid},
		{name: "sessionAffinityConfig with None", errs: svcErrs(nil, func(s *corev1.Service) {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{}
		}), wantField: "spec.sessionAffinityConfig", wantType: forbidden},
		{name: "NodePort headless", errs: svcErrs(func(s *corev1.Service) { nodePortSvc(s); s.Spec.ClusterIP = "None" }, nil), wantField: "spec.clusterIP", wantType: invalid},
		{name: "ExternalName without externalName", errs: svcErrs(func(s *corev1.Service) { externalNameSvc(s); s.Spec.ExternalName = "" }, nil), wantField: "spec.externalName", wantType: required},
		{name: "ExternalName externalName invalid", errs: svcErrs(func(s *corev1.Service) { externalNameSvc(s); s.Spec.ExternalName = "db_1.example.com" }, nil), wantField: "spec.externalName", wantType: invalid},
		{name: "ExternalName with cluster IP", errs: svcErrs(func(s *corev1.Service) { externalNameSvc(s); s.Spec.ClusterIP = "10.96.0.10" }, nil), wantField: "spec.clusterIP", wantType: invalid},
		{name: "ExternalName with ipFamilies", errs: svcErrs(func(s *corev1.Service) {
			externalNameSvc(s)
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}, nil), wantField: "spec.ipFamilies", wantType: forbidden},
		{name: "ExternalName with ipFamilyPolicy", errs: svcErrs(func(s *corev1.Service) {
			externalNameSvc(s)
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		}, nil), wantField: "spec.ipFamilyPolicy", wantType: forbidden},
		{name: "trafficDistribution unsupported", errs: svcErrs(func(s *corev1.Service) { s.Spec.TrafficDistribution = ptr("Random") }, nil), wantField: "spec.trafficDistribution", wantType: notSupported},
		{name: "status ingress IP invalid", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.300"}}
		}, nil), wantField: "status.loadBalancer.ingress[0].ip", wantType: invalid},
		{name: "status ingress hostname is an IP", errs: svcErrs(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "192.0.2.1"}}
		}, nil), wantField: "status.loadBalancer.ingress[0].hostname", wantType: invalid},
		{name: "status ingress on ClusterIP", errs: svcErrs(func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}}
		}, nil), wantField: "status.loadBalancer.ingress", wantType: forbidden},
	})
}

// storedDualStackLB is a Service as the server would have stored it.
func storedDualStackLB() *corev1.Service {
	s := svc(func(s *corev1.Service) {
		dualStackSvc(s)
		s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyPreferDualStack)
		lbLocalSvc(s)
		s.Spec.LoadBalancerClass = ptr("example.com/lb")
	})
	s.ResourceVersion = "42"
	return s
}

func svcUpdateErrs(mutate func(s *corev1.Service)) func() field.ErrorList {
	return func() field.ErrorList {
		old := storedDualStackLB()
		s := old.DeepCopy()
		mutate(s)
		return validation.ServiceUpdate(s, old)
	}
}

func TestServiceUpdate(t *testing.T) {
	run(t, []testCase{
		{name: "valid selector change", errs: svcUpdateErrs(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web2"} })},
		{name: "valid release of secondary IP with SingleStack", errs: svcUpdateErrs(func(s *corev1.Service) {
			s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1]
			s.Spec.IPFamilies = s.Spec.IPFamilies[:1]
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		})},
		{name: "valid move to ExternalName", errs: svcUpdateErrs(func(s *corev1.Service) {
			*s = *svc(externalNameSvc)
			s.ResourceVersion = "42"
		})},
		{name: "valid upgrade to dual-stack", errs: func() field.ErrorList {
			old := withRV(svc(nil))
			s := old.DeepCopy()
			s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00::10"}
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
			s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyPreferDualStack)
			return validation.ServiceUpdate(s, old)
		}},
		{name: "valid from ExternalName to ClusterIP", errs: func() field.ErrorList {
			old := withRV(svc(externalNameSvc))
			return validation.ServiceUpdate(withRV(svc(nil)), old)
		}},
		{name: "clusterIP changed", errs: svcUpdateErrs(func(s *corev1.Service) {
			s.Spec.ClusterIP = "10.96.0.11"
			s.Spec.ClusterIPs[0] = "10.96.0.11"
		}), wantField: "spec.clusterIPs[0]", wantType: invalid},
		{name: "secondary clusterIP changed", errs: svcUpdateErrs(func(s *corev1.Service) { s.Spec.ClusterIPs[1] = "fd00::11" }), wantField: "spec.clusterIPs[1]", wantType: invalid},
		{name: "primary clusterIP unset", errs: svcUpdateErrs(func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
		}), wantField: "spec.clusterIPs[0]", wantType: invalid},
		{name: "release of secondary IP without SingleStack", errs: svcUpdateErrs(func(s *corev1.Service) {
			s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1]
			s.Spec.IPFamilies = s.Spec.IPFamilies[:1]
		}), wantField: "spec.ipFamilyPolicy", wantType: invalid},
		{name: "primary ipFamily changed", errs: svcUpdateErrs(func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
		}), wantField: "spec.ipFamilies[0]", wantType: invalid},
		{name: "loadBalancerClass changed", errs: svcUpdateErrs(func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr("example.com/other") }), wantField: "spec.loadBalancerClass", wantType: invalid},
		{name: "healthCheckNodePort changed", errs: svcUpdateErrs(func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 32001 }), wantField: "spec.healthCheckNodePort", wantType: forbidden},
		{name: "resourceVersion missing", errs: svcUpdateErrs(func(s *corev1.Service) { s.ResourceVersion = "" }), wantField: "metadata.resourceVersion", wantType: invalid},
		{name: "name changed", errs: svcUpdateErrs(func(s *corev1.Service) { s.Name = "web2" }), wantField: "metadata.name", wantType: invalid},
		{name: "new spec still validated", errs: svcUpdateErrs(func(s *corev1.Service) { s.Spec.Type = "Magic" }), wantField: "spec.type", wantType: notSupported},
	})
}

func TestServiceStatusUpdate(t *testing.T) {
	statusErrs := func(mutate func(s *corev1.Service)) func() field.ErrorList {
		return func() field.ErrorList {
			old := storedDualStackLB()
			s := old.DeepCopy()
			mutate(s)
			return validation.ServiceStatusUpdate(s, old)
		}
	}
	run(t, []testCase{
		{name: "valid ingress", errs: statusErrs(func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: ptr(corev1.LoadBalancerIPModeProxy),
				Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
		})},
		{name: "ipMode unsupported", errs: statusErrs(func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: ptr(corev1.LoadBalancerIPMode("Direct"))}}
		}), wantField: "status.loadBalancer.ingress[0].ipMode", wantType: notSupported},
		{name: "ipMode missing", errs: statusErrs(func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}
		}), wantField: "status.loadBalancer.ingress[0].ipMode", wantType: required},
		{name: "ingress port protocol unsupported", errs: statusErrs(func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example.com", Ports: []corev1.PortStatus{{Port: 80, Protocol: "ICMP"}}}}
		}), wantField: "status.loadBalancer.ingress[0].ports[0].protocol", wantType: notSupported},
		{name: "spec change through status", errs: statusErrs(func(s *corev1.Service) { s.Spec.Selector = nil }), wantField: "spec", wantType: forbidden},
	})
}

// ---------------------------------------------------------------- Pod

func pod(pre func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.example.com/app:1.0",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http"), Path: "/healthz"},
				}},
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)},
				}},
			}},
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox:1.36", Command: []string{"true"}}},
		},
	}
	if pre != nil {
		pre(p)
	}
	defaulting.Pod(p)
	return p
}

func podErrs(pre, post func(*corev1.Pod)) func() field.ErrorList {
	return func() field.ErrorList {
		p := pod(pre)
		if post != nil {
			post(p)
		}
		return validation.Pod(p)
	}
}

func c0(p *corev1.Pod) *corev1.Container { return &p.Spec.Containers[0] }

func TestPod(t *testing.T) {
	run(t, []testCase{
		{name: "valid", errs: podErrs(nil, nil)},
		{name: "valid hostNetwork", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		}, nil)},
		{name: "valid sidecar with probes", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{
				Name: "proxy", Image: "proxy:2", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways),
				Ports:          []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 15021}}},
			})
		}, nil)},
		{name: "valid status", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.NodeName = "node-1"
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:244:1::5"}}
			p.Status.HostIP = "192.0.2.11"
		}, nil)},
		{name: "valid DNS config", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.53", "2001:db8::53"}, Searches: []string{"svc.cluster.local.", "."},
				Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr("2")}}}
		}, nil)},
		{name: "valid host aliases and toleration", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.HostAliases = []corev1.HostAlias{{IP: "192.0.2.1", Hostnames: []string{"db.local"}}}
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "net", Effect: corev1.TaintEffectNoSchedule}}
		}, nil)},

		{name: "name invalid", errs: podErrs(func(p *corev1.Pod) { p.Name = "Web_0" }, nil), wantField: "metadata.name", wantType: invalid},
		{name: "namespace missing", errs: podErrs(func(p *corev1.Pod) { p.Namespace = "" }, nil), wantField: "metadata.namespace", wantType: required},
		{name: "no containers", errs: podErrs(func(p *corev1.Pod) { p.Spec.Containers = nil }, nil), wantField: "spec.containers", wantType: required},
		{name: "container name not a DNS label", errs: podErrs(func(p *corev1.Pod) { c0(p).Name = "App" }, nil), wantField: "spec.containers[0].name", wantType: invalid},
		{name: "container name missing", errs: podErrs(func(p *corev1.Pod) { c0(p).Name = "" }, nil), wantField: "spec.containers[0].name", wantType: required},
		{name: "container name duplicate across init and regular", errs: podErrs(func(p *corev1.Pod) { p.Spec.InitContainers[0].Name = "app" }, nil), wantField: "spec.initContainers[0].name", wantType: duplicate},
		{name: "container name duplicate", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "app", Image: "x:1"})
		}, nil), wantField: "spec.containers[1].name", wantType: duplicate},
		{name: "image missing", errs: podErrs(func(p *corev1.Pod) { c0(p).Image = "" }, nil), wantField: "spec.containers[0].image", wantType: required},
		{name: "image with whitespace", errs: podErrs(func(p *corev1.Pod) { c0(p).Image = " app:1" }, nil), wantField: "spec.containers[0].image", wantType: invalid},
		{name: "imagePullPolicy unsupported", errs: podErrs(func(p *corev1.Pod) { c0(p).ImagePullPolicy = "Sometimes" }, nil), wantField: "spec.containers[0].imagePullPolicy", wantType: notSupported},
		{name: "containerPort 0", errs: podErrs(func(p *corev1.Pod) { c0(p).Ports[0].ContainerPort = 0 }, nil), wantField: "spec.containers[0].ports[0].containerPort", wantType: required},
		{name: "containerPort too large", errs: podErrs(func(p *corev1.Pod) { c0(p).Ports[0].ContainerPort = 65536 }, nil), wantField: "spec.containers[0].ports[0].containerPort", wantType: invalid},
		{name: "hostPort too large", errs: podErrs(func(p *corev1.Pod) { c0(p).Ports[0].HostPort = 70000 }, nil), wantField: "spec.containers[0].ports[0].hostPort", wantType: invalid},
		{name: "hostIP invalid", errs: podErrs(func(p *corev1.Pod) { c0(p).Ports[0].HostPort = 80; c0(p).Ports[0].HostIP = "localhost" }, nil), wantField: "spec.containers[0].ports[0].hostIP", wantType: invalid},
		{name: "port protocol unsupported", errs: podErrs(func(p *corev1.Pod) { c0(p).Ports[0].Protocol = "ICMP" }, nil), wantField: "spec.containers[0].ports[0].protocol", wantType: notSupported},
		{name: "port name invalid characters", errs: podErrs(func(p *corev1.Pod) { c0(p).Ports[0].Name = "http_alt" }, nil), wantField: "spec.containers[0].ports[0].name", wantType: invalid},
		{name: "port name longer than 15", errs: podErrs(func(p *corev1.Pod) { c0(p).Ports[0].Name = "http-alternative" }, nil), wantField: "spec.containers[0].ports[0].name", wantType: invalid},
		{name: "port name without letter", errs: podErrs(func(p *corev1.Pod) { c0(p).Ports[0].Name = "8080" }, nil), wantField: "spec.containers[0].ports[0].name", wantType: invalid},
		{name: "port name duplicate", errs: podErrs(func(p *corev1.Pod) { c0(p).Ports[1].Name = "http" }, nil), wantField: "spec.containers[0].ports[1].name", wantType: duplicate},
		{name: "hostPort conflict between containers", errs: podErrs(func(p *corev1.Pod) {
			c0(p).Ports[0].HostPort = 80
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "other", Image: "x:1", Ports: []corev1.ContainerPort{{ContainerPort: 8081, HostPort: 80}}})
		}, nil), wantField: "spec.containers[1].ports[0].hostPort", wantType: duplicate},
		{name: "hostNetwork hostPort differs from containerPort", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			c0(p).Ports[0].HostPort = 80
		}, nil), wantField: "spec.containers[0].ports[0].hostPort", wantType: invalid},
		{name: "probe without handler", errs: podErrs(func(p *corev1.Pod) { c0(p).LivenessProbe.TCPSocket = nil }, nil), wantField: "spec.containers[0].livenessProbe", wantType: required},
		{name: "probe with two handlers", errs: podErrs(func(p *corev1.Pod) {
			c0(p).LivenessProbe.Exec = &corev1.ExecAction{Command: []string{"true"}}
		}, nil), wantField: "spec.containers[0].livenessProbe.tcpSocket", wantType: forbidden},
		{name: "probe exec without command", errs: podErrs(func(p *corev1.Pod) {
			c0(p).LivenessProbe.TCPSocket = nil
			c0(p).LivenessProbe.Exec = &corev1.ExecAction{}
		}, nil), wantField: "spec.containers[0].livenessProbe.exec.command", wantType: required},
		{name: "probe port invalid", errs: podErrs(func(p *corev1.Pod) { c0(p).ReadinessProbe.HTTPGet.Port = intstr.FromInt32(0) }, nil), wantField: "spec.containers[0].readinessProbe.httpGet.port", wantType: invalid},
		{name: "probe scheme unsupported", errs: podErrs(func(p *corev1.Pod) { c0(p).ReadinessProbe.HTTPGet.Scheme = "FTP" }, nil), wantField: "spec.containers[0].readinessProbe.httpGet.scheme", wantType: notSupported},
		{name: "probe negative period", errs: podErrs(func(p *corev1.Pod) { c0(p).ReadinessProbe.PeriodSeconds = -1 }, nil), wantField: "spec.containers[0].readinessProbe.periodSeconds", wantType: invalid},
		{name: "probe negative initial delay", errs: podErrs(func(p *corev1.Pod) { c0(p).ReadinessProbe.InitialDelaySeconds = -1 }, nil), wantField: "spec.containers[0].readinessProbe.initialDelaySeconds", wantType: invalid},
		{name: "liveness successThreshold not 1", errs: podErrs(func(p *corev1.Pod) { c0(p).LivenessProbe.SuccessThreshold = 2 }, nil), wantField: "spec.containers[0].livenessProbe.successThreshold", wantType: invalid},
		{name: "readiness probe terminationGracePeriodSeconds", errs: podErrs(func(p *corev1.Pod) {
			c0(p).ReadinessProbe.TerminationGracePeriodSeconds = ptr(int64(10))
		}, nil), wantField: "spec.containers[0].readinessProbe.terminationGracePeriodSeconds", wantType: invalid},
		{name: "init container with readiness probe", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		}, nil), wantField: "spec.initContainers[0].readinessProbe", wantType: forbidden},
		{name: "ephemeral containers on create", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox:1"}}}
		}, nil), wantField: "spec.ephemeralContainers", wantType: forbidden},
		{name: "restartPolicy unsupported", errs: podErrs(func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, nil), wantField: "spec.restartPolicy", wantType: notSupported},
		{name: "dnsPolicy unsupported", errs: podErrs(func(p *corev1.Pod) { p.Spec.DNSPolicy = "Google" }, nil), wantField: "spec.dnsPolicy", wantType: notSupported},
		{name: "dnsPolicy None without dnsConfig", errs: podErrs(func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone }, nil), wantField: "spec.dnsConfig", wantType: required},
		{name: "dnsConfig nameserver invalid", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"dns.example.com"}}
		}, nil), wantField: "spec.dnsConfig.nameservers[0]", wantType: invalid},
		{name: "dnsConfig too many nameservers", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"}}
		}, nil), wantField: "spec.dnsConfig.nameservers", wantType: invalid},
		{name: "dnsConfig search invalid", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Searches: []string{"Bad_Domain"}}
		}, nil), wantField: "spec.dnsConfig.searches[0]", wantType: invalid},
		{name: "nodeName invalid", errs: podErrs(func(p *corev1.Pod) { p.Spec.NodeName = "Node_1" }, nil), wantField: "spec.nodeName", wantType: invalid},
		{name: "hostname invalid", errs: podErrs(func(p *corev1.Pod) { p.Spec.Hostname = "web.0" }, nil), wantField: "spec.hostname", wantType: invalid},
		{name: "hostAlias IP invalid", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.HostAliases = []corev1.HostAlias{{IP: "db", Hostnames: []string{"db.local"}}}
		}, nil), wantField: "spec.hostAliases[0].ip", wantType: invalid},
		{name: "toleration operator unsupported", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: "In"}}
		}, nil), wantField: "spec.tolerations[0].operator", wantType: notSupported},
		{name: "toleration seconds without NoExecute", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptr(int64(5))}}
		}, nil), wantField: "spec.tolerations[0].effect", wantType: invalid},
		{name: "toleration effect unsupported", errs: podErrs(func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: "NoRun"}}
		}, nil), wantField: "spec.tolerations[0].effect", wantType: notSupported},
		{name: "terminationGracePeriodSeconds negative", errs: podErrs(func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr(int64(-1)) }, nil), wantField: "spec.terminationGracePeriodSeconds", wantType: invalid},
		{name: "activeDeadlineSeconds zero", errs: podErrs(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(0)) }, nil), wantField: "spec.activeDeadlineSeconds", wantType: invalid},
		{name: "status podIP invalid", errs: podErrs(func(p *corev1.Pod) { p.Status.PodIP = "10.244.1" }, nil), wantField: "status.podIP", wantType: invalid},
		{name: "status podIPs entry invalid", errs: podErrs(func(p *corev1.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00::zz"}}
		}, nil), wantField: "status.podIPs[1].ip", wantType: invalid},
		{name: "status podIPs[0] differs from podIP", errs: podErrs(func(p *corev1.Pod) {
			p.Status.PodIP = "10.244.1.6"
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}}
		}, nil), wantField: "status.podIPs[0].ip", wantType: invalid},
		{name: "status podIPs same family", errs: podErrs(func(p *corev1.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "10.244.1.6"}}
		}, nil), wantField: "status.podIPs", wantType: invalid},
		{name: "status hostIPs[0] differs from hostIP", errs: podErrs(func(p *corev1.Pod) {
			p.Status.HostIP = "192.0.2.11"
			p.Status.HostIPs = []corev1.HostIP{{IP: "192.0.2.12"}}
		}, nil), wantField: "status.hostIPs[0].ip", wantType: invalid},
		{name: "status phase unsupported", errs: podErrs(func(p *corev1.Pod) { p.Status.Phase = "Sleeping" }, nil), wantField: "status.phase", wantType: notSupported},
	})
}

func storedPod() *corev1.Pod {
	p := pod(func(p *corev1.Pod) {
		p.Spec.ActiveDeadlineSeconds = ptr(int64(600))
		p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(60))}}
	})
	p.ResourceVersion = "42"
	return p
}

func podUpdateErrs(mutate func(p *corev1.Pod)) func() field.ErrorList {
	return func() field.ErrorList {
		old := storedPod()
		p := old.DeepCopy()
		mutate(p)
		return validation.PodUpdate(p, old)
	}
}

func TestPodUpdate(t *testing.T) {
	run(t, []testCase{
		{name: "valid image change", errs: podUpdateErrs(func(p *corev1.Pod) {
			c0(p).Image = "registry.example.com/app:1.1"
			p.Spec.InitContainers[0].Image = "busybox:1.37"
		})},
		{name: "valid activeDeadlineSeconds shortened", errs: podUpdateErrs(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(300)) })},
		{name: "valid toleration added and seconds changed", errs: podUpdateErrs(func(p *corev1.Pod) {
			p.Spec.Tolerations[0].TolerationSeconds = ptr(int64(30))
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists})
		})},
		{name: "valid terminationGracePeriodSeconds change", errs: podUpdateErrs(func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr(int64(5)) })},
		{name: "valid label change", errs: podUpdateErrs(func(p *corev1.Pod) { p.Labels = map[string]string{"tier": "web"} })},

		{name: "activeDeadlineSeconds extended", errs: podUpdateErrs(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(601)) }), wantField: "spec.activeDeadlineSeconds", wantType: invalid},
		{name: "activeDeadlineSeconds removed", errs: podUpdateErrs(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = nil }), wantField: "spec.activeDeadlineSeconds", wantType: invalid},
		{name: "toleration removed", errs: podUpdateErrs(func(p *corev1.Pod) { p.Spec.Tolerations = p.Spec.Tolerations[1:] }), wantField: "spec.tolerations", wantType: forbidden},
		{name: "toleration modified", errs: podUpdateErrs(func(p *corev1.Pod) { p.Spec.Tolerations[0].Key = "other" }), wantField: "spec.tolerations", wantType: forbidden},
		{name: "nodeName set by update", errs: podUpdateErrs(func(p *corev1.Pod) { p.Spec.NodeName = "node-1" }), wantField: "spec.nodeName", wantType: forbidden},
		{name: "container port changed", errs: podUpdateErrs(func(p *corev1.Pod) { c0(p).Ports[0].ContainerPort = 8081 }), wantField: "spec", wantType: forbidden},
		{name: "hostNetwork changed", errs: podUpdateErrs(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), wantField: "spec", wantType: forbidden},
		{name: "container added", errs: podUpdateErrs(func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "extra", Image: "x:1", ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePolicy: corev1.TerminationMessageReadFile})
		}), wantField: "spec", wantType: forbidden},
		{name: "image emptied", errs: podUpdateErrs(func(p *corev1.Pod) { c0(p).Image = "" }), wantField: "spec.containers[0].image", wantType: required},
		{name: "resourceVersion missing", errs: podUpdateErrs(func(p *corev1.Pod) { p.ResourceVersion = "" }), wantField: "metadata.resourceVersion", wantType: invalid},
		{name: "namespace changed", errs: podUpdateErrs(func(p *corev1.Pod) { p.Namespace = "other" }), wantField: "metadata.namespace", wantType: invalid},
	})
}

func TestPodStatusUpdate(t *testing.T) {
	statusErrs := func(mutate func(p *corev1.Pod)) func() field.ErrorList {
		return func() field.ErrorList {
			old := storedPod()
			old.Spec.NodeName = "node-1"
			p := old.DeepCopy()
			mutate(p)
			return validation.PodStatusUpdate(p, old)
		}
	}
	run(t, []testCase{
		{name: "valid running with dual-stack IPs", errs: statusErrs(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP = "fd00:244:1::5"
			p.Status.PodIPs = []corev1.PodIP{{IP: "fd00:244:1::5"}, {IP: "10.244.1.5"}}
			p.Status.HostIP = "192.0.2.11"
			p.Status.HostIPs = []corev1.HostIP{{IP: "192.0.2.11"}}
		})},
		{name: "podIP invalid", errs: statusErrs(func(p *corev1.Pod) { p.Status.PodIP = "10.244.1.500" }), wantField: "status.podIP", wantType: invalid},
		{name: "podIPs entry invalid", errs: statusErrs(func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "pod"}} }), wantField: "status.podIPs[0].ip", wantType: invalid},
		{name: "podIPs duplicate", errs: statusErrs(func(p *corev1.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "10.244.1.5"}}
		}), wantField: "status.podIPs[1]", wantType: duplicate},
		{name: "podIPs more than two", errs: statusErrs(func(p *corev1.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00::5"}, {IP: "10.244.1.6"}}
		}), wantField: "status.podIPs", wantType: invalid},
		{name: "terminal phase left", errs: func() field.ErrorList {
			old := storedPod()
			old.Status.Phase = corev1.PodSucceeded
			p := old.DeepCopy()
			p.Status.Phase = corev1.PodRunning
			return validation.PodStatusUpdate(p, old)
		}, wantField: "status.phase", wantType: forbidden},
		{name: "spec changed through status", errs: statusErrs(func(p *corev1.Pod) { c0(p).Image = "evil:1" }), wantField: "spec", wantType: forbidden},
		{name: "resourceVersion missing", errs: statusErrs(func(p *corev1.Pod) { p.ResourceVersion = "" }), wantField: "metadata.resourceVersion", wantType: invalid},
	})
}

func TestBinding(t *testing.T) {
	binding := func(mutate func(b *corev1.Binding)) func() field.ErrorList {
		return func() field.ErrorList {
			b := &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default"},
				Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"},
			}
			if mutate != nil {
				mutate(b)
			}
			return validation.Binding(b)
		}
	}
	run(t, []testCase{
		{name: "valid", errs: binding(nil)},
		{name: "valid without kind", errs: binding(func(b *corev1.Binding) { b.Target.Kind = "" })},
		{name: "kind not Node", errs: binding(func(b *corev1.Binding) { b.Target.Kind = "Pod" }), wantField: "target.kind", wantType: notSupported},
		{name: "name missing", errs: binding(func(b *corev1.Binding) { b.Target.Name = "" }), wantField: "target.name", wantType: required},
		{name: "name not a node name", errs: binding(func(b *corev1.Binding) { b.Target.Name = "Node 1" }), wantField: "target.name", wantType: invalid},
		{name: "namespace missing", errs: binding(func(b *corev1.Binding) { b.Namespace = "" }), wantField: "metadata.namespace", wantType: required},
	})
}

// ---------------------------------------------------------------- Namespace and Node

func namespace(pre func(*corev1.Namespace)) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}
	if pre != nil {
		pre(ns)
	}
	defaulting.Namespace(ns)
	return ns
}

func TestNamespace(t *testing.T) {
	nsErrs := func(pre func(*corev1.Namespace)) func() field.ErrorList {
		return func() field.ErrorList { return validation.Namespace(namespace(pre)) }
	}
	run(t, []testCase{
		{name: "valid", errs: nsErrs(nil)},
		{name: "valid extra finalizer", errs: nsErrs(func(ns *corev1.Namespace) { ns.Spec.Finalizers = []corev1.FinalizerName{"example.com/cleanup"} })},
		{name: "name uppercase", errs: nsErrs(func(ns *corev1.Namespace) { ns.Name = "Team-A" }), wantField: "metadata.name", wantType: invalid},
		{name: "name with dot (subdomain, not label)", errs: nsErrs(func(ns *corev1.Namespace) { ns.Name = "team.a" }), wantField: "metadata.name", wantType: invalid},
		{name: "name missing", errs: nsErrs(func(ns *corev1.Namespace) { ns.Name = "" }), wantField: "metadata.name", wantType: required},
		{name: "namespace set on cluster-scoped object", errs: nsErrs(func(ns *corev1.Namespace) { ns.Namespace = "default" }), wantField: "metadata.namespace", wantType: forbidden},
		{name: "unqualified finalizer", errs: nsErrs(func(ns *corev1.Namespace) { ns.Spec.Finalizers = []corev1.FinalizerName{"cleanup"} }), wantField: "spec.finalizers[0]", wantType: invalid},
		{name: "phase unsupported", errs: nsErrs(func(ns *corev1.Namespace) { ns.Status.Phase = "Gone" }), wantField: "status.phase", wantType: notSupported},
		{name: "label invalid", errs: nsErrs(func(ns *corev1.Namespace) { ns.Labels = map[string]string{"bad key!": "x"} }), wantField: "metadata.labels", wantType: invalid},
	})
}

func TestNamespaceUpdate(t *testing.T) {
	update := func(mutate func(ns *corev1.Namespace)) func() field.ErrorList {
		return func() field.ErrorList {
			old := withRV(namespace(nil))
			ns := old.DeepCopy()
			mutate(ns)
			return validation.NamespaceUpdate(ns, old)
		}
	}
	run(t, []testCase{
		{name: "valid label change", errs: update(func(ns *corev1.Namespace) { ns.Labels["env"] = "prod" })},
		{name: "name changed", errs: update(func(ns *corev1.Namespace) { ns.Name = "team-b" }), wantField: "metadata.name", wantType: invalid},
		{name: "bad finalizer name", errs: update(func(ns *corev1.Namespace) { ns.Finalizers = []string{"Not Valid"} }), wantField: "metadata.finalizers", wantType: invalid},
	})
}

func node(pre func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1.example.com"},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24", "fd00:244:1::/64"}, ProviderID: "metal://node-1"},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "192.0.2.11"},
				{Type: corev1.NodeInternalIP, Address: "2001:db8::11"},
				{Type: corev1.NodeHostName, Address: "node-1"},
			},
			Capacity: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
		},
	}
	if pre != nil {
		pre(n)
	}
	defaulting.Node(n)
	return n
}

func TestNode(t *testing.T) {
	nodeErrs := func(pre func(*corev1.Node)) func() field.ErrorList {
		return func() field.ErrorList { return validation.Node(node(pre)) }
	}
	run(t, []testCase{
		{name: "valid", errs: nodeErrs(nil)},
		{name: "valid without CIDRs", errs: nodeErrs(func(n *corev1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs = "", nil })},
		{name: "valid IPv6-primary", errs: nodeErrs(func(n *corev1.Node) {
			n.Spec.PodCIDR = ""
			n.Spec.PodCIDRs = []string{"fd00:244:1::/64", "10.244.1.0/24"}
		})},
		{name: "valid taints", errs: nodeErrs(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute}, {Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}}
		})},

		{name: "name invalid", errs: nodeErrs(func(n *corev1.Node) { n.Name = "Node_1" }), wantField: "metadata.name", wantType: invalid},
		{name: "namespace set", errs: nodeErrs(func(n *corev1.Node) { n.Namespace = "default" }), wantField: "metadata.namespace", wantType: forbidden},
		{name: "podCIDR invalid", errs: nodeErrs(func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.1.0/33"; n.Spec.PodCIDRs = nil }), wantField: "spec.podCIDR", wantType: invalid},
		{name: "podCIDRs entry not a CIDR", errs: nodeErrs(func(n *corev1.Node) { n.Spec.PodCIDRs[1] = "fd00:244:1::" }), wantField: "spec.podCIDRs[1]", wantType: invalid},
		{name: "podCIDRs entry with host bits", errs: nodeErrs(func(n *corev1.Node) {
			n.Spec.PodCIDR = ""
			n.Spec.PodCIDRs = []string{"10.244.1.1/24"}
		}), wantField: "spec.podCIDRs[0]", wantType: invalid},
		{name: "podCIDR differs from podCIDRs[0]", errs: nodeErrs(func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.2.0/24" }), wantField: "spec.podCIDRs", wantType: invalid},
		{name: "podCIDRs same family", errs: nodeErrs(func(n *corev1.Node) { n.Spec.PodCIDRs[1] = "10.244.2.0/24" }), wantField: "spec.podCIDRs", wantType: invalid},
		{name: "podCIDRs more than two", errs: nodeErrs(func(n *corev1.Node) {
			n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "10.245.1.0/24")
		}), wantField: "spec.podCIDRs", wantType: invalid},
		{name: "podCIDRs duplicate", errs: nodeErrs(func(n *corev1.Node) { n.Spec.PodCIDRs[1] = n.Spec.PodCIDRs[0] }), wantField: "spec.podCIDRs[1]", wantType: duplicate},
		{name: "InternalIP not an IP", errs: nodeErrs(func(n *corev1.Node) { n.Status.Addresses[0].Address = "node-1.internal" }), wantField: "status.addresses[0].address", wantType: invalid},
		{name: "ExternalIP not an IP", errs: nodeErrs(func(n *corev1.Node) {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113"})
		}), wantField: "status.addresses[3].address", wantType: invalid},
		{name: "address duplicate", errs: nodeErrs(func(n *corev1.Node) { n.Status.Addresses[1] = n.Status.Addresses[0] }), wantField: "status.addresses[1]", wantType: duplicate},
		{name: "taint effect unsupported", errs: nodeErrs(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Effect: "NoRun"}}
		}), wantField: "spec.taints[0].effect", wantType: notSupported},
		{name: "taint duplicate", errs: nodeErrs(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "a", Effect: corev1.TaintEffectNoSchedule}, {Key: "dedicated", Value: "b", Effect: corev1.TaintEffectNoSchedule}}
		}), wantField: "spec.taints[1]", wantType: duplicate},
		{name: "capacity negative", errs: nodeErrs(func(n *corev1.Node) { n.Status.Capacity[corev1.ResourcePods] = resource.MustParse("-1") }), wantField: "status.capacity[pods]", wantType: invalid},
	})
}

func TestNodeUpdate(t *testing.T) {
	update := func(pre func(*corev1.Node), mutate func(n *corev1.Node)) func() field.ErrorList {
		return func() field.ErrorList {
			old := withRV(node(pre))
			n := old.DeepCopy()
			mutate(n)
			defaulting.Node(n)
			return validation.NodeUpdate(n, old)
		}
	}
	unset := func(n *corev1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs, n.Spec.ProviderID = "", nil, "" }
	run(t, []testCase{
		{name: "valid status change", errs: update(nil, func(n *corev1.Node) { n.Status.Addresses = n.Status.Addresses[:1] })},
		{name: "valid podCIDRs set once", errs: update(unset, func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.3.0/24", "fd00:244:3::/64"} })},
		{name: "valid providerID set once", errs: update(unset, func(n *corev1.Node) { n.Spec.ProviderID = "metal://node-1" })},
		{name: "valid unschedulable and taints change", errs: update(nil, func(n *corev1.Node) {
			n.Spec.Unschedulable = true
			n.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}}
		})},

		{name: "podCIDR changed", errs: update(nil, func(n *corev1.Node) {
			n.Spec.PodCIDR = "10.244.9.0/24"
			n.Spec.PodCIDRs[0] = "10.244.9.0/24"
		}), wantField: "spec.podCIDR", wantType: forbidden},
		{name: "podCIDRs secondary changed", errs: update(nil, func(n *corev1.Node) { n.Spec.PodCIDRs[1] = "fd00:244:9::/64" }), wantField: "spec.podCIDRs", wantType: forbidden},
		{name: "podCIDRs secondary removed", errs: update(nil, func(n *corev1.Node) { n.Spec.PodCIDRs = n.Spec.PodCIDRs[:1] }), wantField: "spec.podCIDRs", wantType: forbidden},
		{name: "podCIDRs cleared", errs: update(nil, func(n *corev1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs = "", nil }), wantField: "spec.podCIDRs", wantType: forbidden},
		{name: "providerID changed", errs: update(nil, func(n *corev1.Node) { n.Spec.ProviderID = "metal://node-2" }), wantField: "spec.providerID", wantType: forbidden},
		{name: "invalid podCIDR set once", errs: update(unset, func(n *corev1.Node) { n.Spec.PodCIDR = "10.244.3.0" }), wantField: "spec.podCIDR", wantType: invalid},
		{name: "address invalid", errs: update(nil, func(n *corev1.Node) { n.Status.Addresses[0].Address = "nope" }), wantField: "status.addresses[0].address", wantType: invalid},
		{name: "resourceVersion missing", errs: update(nil, func(n *corev1.Node) { n.ResourceVersion = "" }), wantField: "metadata.resourceVersion", wantType: invalid},
	})
}

// ---------------------------------------------------------------- EndpointSlice

func slice(pre func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abc12", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			Hostname:   ptr("web-0"),
			NodeName:   ptr("node-1.example.com"),
			Zone:       ptr("zone-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0"},
			Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
	}
	if pre != nil {
		pre(s)
	}
	defaulting.EndpointSlice(s)
	return s
}

func addresses(n int, format func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = format(i)
	}
	return out
}

func TestEndpointSlice(t *testing.T) {
	sliceErrs := func(pre, post func(*discoveryv1.EndpointSlice)) func() field.ErrorList {
		return func() field.ErrorList {
			s := slice(pre)
			if post != nil {
				post(s)
			}
			return validation.EndpointSlice(s)
		}
	}
	v4 := func(i int) string { return "10.244." + itoa(i/250) + "." + itoa(i%250+1) }
	run(t, []testCase{
		{name: "valid IPv4", errs: sliceErrs(nil, nil)},
		{name: "valid IPv6", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.AddressType = discoveryv1.AddressTypeIPv6
			s.Endpoints[0].Addresses = []string{"fd00:244:1::5"}
		}, nil)},
		{name: "valid FQDN", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.AddressType = discoveryv1.AddressTypeFQDN
			s.Endpoints[0].Addresses = []string{"db.example.com"}
		}, nil)},
		{name: "valid empty slice", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Endpoints, s.Ports = nil, nil }, nil)},
		{name: "valid port 0 and one unnamed port", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.Ports = append(s.Ports, discoveryv1.EndpointPort{Port: ptr(int32(0))})
		}, nil)},
		{name: "valid limits exactly", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.Endpoints = make([]discoveryv1.Endpoint, 1000)
			for i := range s.Endpoints {
				s.Endpoints[i].Addresses = []string{v4(i)}
			}
			s.Endpoints[0].Addresses = addresses(100, v4)
		}, nil)},

		{name: "name invalid", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Name = "Web" }, nil), wantField: "metadata.name", wantType: invalid},
		{name: "addressType unsupported", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.AddressType = "IP" }, nil), wantField: "addressType", wantType: notSupported},
		{name: "addressType missing", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.AddressType = "" }, nil), wantField: "addressType", wantType: required},
		{name: "too many endpoints", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.Endpoints = make([]discoveryv1.Endpoint, 1001)
			for i := range s.Endpoints {
				s.Endpoints[i].Addresses = []string{v4(i)}
			}
		}, nil), wantField: "endpoints", wantType: tooMany},
		{name: "endpoint without addresses", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = nil }, nil), wantField: "endpoints[0].addresses", wantType: required},
		{name: "endpoint with too many addresses", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = addresses(101, v4) }, nil), wantField: "endpoints[0].addresses", wantType: tooMany},
		{name: "IPv6 address in IPv4 slice", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"fd00::5"} }, nil), wantField: "endpoints[0].addresses[0]", wantType: invalid},
		{name: "IPv4 address in IPv6 slice", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeIPv6 }, nil), wantField: "endpoints[0].addresses[0]", wantType: invalid},
		{name: "address not an IP", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"10.244.1"} }, nil), wantField: "endpoints[0].addresses[0]", wantType: invalid},
		{name: "address loopback", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"127.0.0.1"} }, nil), wantField: "endpoints[0].addresses[0]", wantType: invalid},
		{name: "FQDN address invalid", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.AddressType = discoveryv1.AddressTypeFQDN
			s.Endpoints[0].Addresses = []string{"db"}
		}, nil), wantField: "endpoints[0].addresses[0]", wantType: invalid},
		{name: "hostname not a DNS label", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Hostname = ptr("web.0") }, nil), wantField: "endpoints[0].hostname", wantType: invalid},
		{name: "nodeName invalid", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].NodeName = ptr("Node_1") }, nil), wantField: "endpoints[0].nodeName", wantType: invalid},
		{name: "zone hint invalid", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Hints.ForZones = []discoveryv1.ForZone{{Name: "zone a"}}
		}, nil), wantField: "endpoints[0].hints.forZones[0].name", wantType: invalid},
		{name: "too many ports", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.Ports = nil
			for i := 0; i < 101; i++ {
				s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr("p" + itoa(i)), Port: ptr(int32(1000 + i))})
			}
		}, nil), wantField: "ports", wantType: tooMany},
		{name: "port name duplicate", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr("http"), Port: ptr(int32(8081))})
		}, nil), wantField: "ports[1].name", wantType: duplicate},
		{name: "two unnamed ports", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) {
			s.Ports = []discoveryv1.EndpointPort{{Port: ptr(int32(80))}, {Port: ptr(int32(81))}}
		}, nil), wantField: "ports[1].name", wantType: duplicate},
		{name: "port name not a DNS label", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Ports[0].Name = ptr("HTTP") }, nil), wantField: "ports[0].name", wantType: invalid},
		{name: "port out of range", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr(int32(65536)) }, nil), wantField: "ports[0].port", wantType: invalid},
		{name: "port negative", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr(int32(-1)) }, nil), wantField: "ports[0].port", wantType: invalid},
		{name: "port protocol unsupported", errs: sliceErrs(func(s *discoveryv1.EndpointSlice) { s.Ports[0].Protocol = ptr(corev1.Protocol("ICMP")) }, nil), wantField: "ports[0].protocol", wantType: notSupported},
		{name: "port protocol missing", errs: sliceErrs(nil, func(s *discoveryv1.EndpointSlice) { s.Ports[0].Protocol = nil }), wantField: "ports[0].protocol", wantType: required},
	})
}

func TestEndpointSliceUpdate(t *testing.T) {
	update := func(mutate func(s *discoveryv1.EndpointSlice)) func() field.ErrorList {
		return func() field.ErrorList {
			old := withRV(slice(nil))
			s := old.DeepCopy()
			mutate(s)
			return validation.EndpointSliceUpdate(s, old)
		}
	}
	run(t, []testCase{
		{name: "valid endpoints change", errs: update(func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Conditions.Ready = ptr(false)
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.2.7"}})
		})},
		{name: "addressType changed", errs: update(func(s *discoveryv1.EndpointSlice) {
			s.AddressType = discoveryv1.AddressTypeIPv6
			s.Endpoints[0].Addresses = []string{"fd00::5"}
		}), wantField: "addressType", wantType: invalid},
		{name: "new address invalid", errs: update(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses[0] = "x" }), wantField: "endpoints[0].addresses[0]", wantType: invalid},
	})
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// ---------------------------------------------------------------- ConfigMap, Lease, Events

func TestConfigMap(t *testing.T) {
	cm := func(mutate func(c *corev1.ConfigMap)) func() field.ErrorList {
		return func() field.ErrorList {
			c := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
				Data:       map[string]string{"config.conf": "mode: nftables", "KEY_2": "v"},
				BinaryData: map[string][]byte{"ca.der": {0x30, 0x82}},
			}
			if mutate != nil {
				mutate(c)
			}
			defaulting.ConfigMap(c)
			return validation.ConfigMap(c)
		}
	}
	run(t, []testCase{
		{name: "valid", errs: cm(nil)},
		{name: "valid at size limit", errs: cm(func(c *corev1.ConfigMap) {
			c.BinaryData = nil
			c.Data = map[string]string{"big": strings.Repeat("x", 1024*1024)}
		})},
		{name: "name invalid", errs: cm(func(c *corev1.ConfigMap) { c.Name = "Kube_Proxy" }), wantField: "metadata.name", wantType: invalid},
		{name: "data key invalid", errs: cm(func(c *corev1.ConfigMap) { c.Data["a/b"] = "x" }), wantField: "data[a/b]", wantType: invalid},
		{name: "data key dot-dot", errs: cm(func(c *corev1.ConfigMap) { c.Data[".."] = "x" }), wantField: "data[..]", wantType: invalid},
		{name: "binaryData key invalid", errs: cm(func(c *corev1.ConfigMap) { c.BinaryData["a b"] = nil }), wantField: "binaryData[a b]", wantType: invalid},
		{name: "key in data and binaryData", errs: cm(func(c *corev1.ConfigMap) { c.BinaryData["config.conf"] = []byte("x") }), wantField: "data[config.conf]", wantType: invalid},
	})
	// The size limit covers data and binaryData together, so upstream reports
	// it on the object root (empty path), which run() reserves for "valid";
	// check it directly.
	t.Run("too large", func(t *testing.T) {
		c := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "default"},
			Data:       map[string]string{"a": strings.Repeat("x", 512*1024)},
			BinaryData: map[string][]byte{"b": make([]byte, 512*1024+1)},
		}
		errs := validation.ConfigMap(c)
		if len(errs) != 1 || errs[0].Type != tooLong {
			t.Fatalf("expected one TooLong error, got:\n%s", dump(errs))
		}
	})
}

func TestConfigMapUpdate(t *testing.T) {
	update := func(immutable bool, mutate func(c *corev1.ConfigMap)) func() field.ErrorList {
		return func() field.ErrorList {
			old := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "default", ResourceVersion: "42"},
				Data:       map[string]string{"k": "v"},
			}
			if immutable {
				old.Immutable = ptr(true)
			}
			c := old.DeepCopy()
			mutate(c)
			return validation.ConfigMapUpdate(c, old)
		}
	}
	run(t, []testCase{
		{name: "valid data change", errs: update(false, func(c *corev1.ConfigMap) { c.Data["k"] = "w" })},
		{name: "valid becoming immutable", errs: update(false, func(c *corev1.ConfigMap) { c.Immutable = ptr(true) })},
		{name: "valid label change on immutable", errs: update(true, func(c *corev1.ConfigMap) { c.Labels = map[string]string{"a": "b"} })},
		{name: "immutable data changed", errs: update(true, func(c *corev1.ConfigMap) { c.Data["k"] = "w" }), wantField: "data", wantType: forbidden},
		{name: "immutable binaryData added", errs: update(true, func(c *corev1.ConfigMap) { c.BinaryData = map[string][]byte{"b": {1}} }), wantField: "binaryData", wantType: forbidden},
		{name: "immutable flag removed", errs: update(true, func(c *corev1.ConfigMap) { c.Immutable = nil }), wantField: "immutable", wantType: forbidden},
		{name: "key invalid", errs: update(false, func(c *corev1.ConfigMap) { c.Data["bad key"] = "x" }), wantField: "data[bad key]", wantType: invalid},
	})
}

func TestLease(t *testing.T) {
	lease := func(mutate func(l *coordinationv1.Lease)) *coordinationv1.Lease {
		now := metav1.NewMicroTime(time.Now())
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "node-1.example.com", Namespace: "kube-node-lease"},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr("node-1"),
				LeaseDurationSeconds: ptr(int32(40)),
				RenewTime:            &now,
				LeaseTransitions:     ptr(int32(0)),
			},
		}
		if mutate != nil {
			mutate(l)
		}
		return l
	}
	create := func(mutate func(l *coordinationv1.Lease)) func() field.ErrorList {
		return func() field.ErrorList { return validation.Lease(lease(mutate)) }
	}
	run(t, []testCase{
		{name: "valid", errs: create(nil)},
		{name: "valid minimal", errs: create(func(l *coordinationv1.Lease) { l.Spec = coordinationv1.LeaseSpec{} })},
		{name: "valid coordinated strategy", errs: create(func(l *coordinationv1.Lease) {
			l.Spec.Strategy = ptr(coordinationv1.OldestEmulationVersion)
			l.Spec.PreferredHolder = ptr("node-2")
		})},
		{name: "name invalid", errs: create(func(l *coordinationv1.Lease) { l.Name = "Node 1" }), wantField: "metadata.name", wantType: invalid},
		{name: "namespace missing", errs: create(func(l *coordinationv1.Lease) { l.Namespace = "" }), wantField: "metadata.namespace", wantType: required},
		{name: "duration zero", errs: create(func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr(int32(0)) }), wantField: "spec.leaseDurationSeconds", wantType: invalid},
		{name: "transitions negative", errs: create(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr(int32(-1)) }), wantField: "spec.leaseTransitions", wantType: invalid},
		{name: "strategy unknown", errs: create(func(l *coordinationv1.Lease) {
			l.Spec.Strategy = ptr(coordinationv1.CoordinatedLeaseStrategy("Newest"))
		}), wantField: "spec.strategy", wantType: notSupported},
		{name: "preferredHolder without strategy", errs: create(func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = ptr("node-2") }), wantField: "spec.preferredHolder", wantType: forbidden},
		{name: "update valid renew", errs: func() field.ErrorList {
			old := withRV(lease(nil))
			l := old.DeepCopy()
			later := metav1.NewMicroTime(time.Now().Add(10 * time.Second))
			l.Spec.RenewTime = &later
			return validation.LeaseUpdate(l, old)
		}},
		{name: "update invalid duration", errs: func() field.ErrorList {
			old := withRV(lease(nil))
			l := old.DeepCopy()
			l.Spec.LeaseDurationSeconds = ptr(int32(-5))
			return validation.LeaseUpdate(l, old)
		}, wantField: "spec.leaseDurationSeconds", wantType: invalid},
	})
}

func coreEvent(mutate func(e *corev1.Event)) *corev1.Event {
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "web-0.17c2a3b4d5e6f708", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0"},
		Reason:         "Scheduled",
		Message:        "Successfully assigned default/web-0 to node-1",
		Type:           corev1.EventTypeNormal,
		Count:          1,
	}
	if mutate != nil {
		mutate(e)
	}
	return e
}

func TestCoreEvent(t *testing.T) {
	create := func(mutate func(e *corev1.Event)) func() field.ErrorList {
		return func() field.ErrorList { return validation.CoreEvent(coreEvent(mutate)) }
	}
	newStyle := func(e *corev1.Event) {
		e.EventTime = metav1.NewMicroTime(time.Now())
		e.ReportingController = "example.com/netd"
		e.ReportingInstance = "netd-node-1"
		e.Action = "Programming"
	}
	run(t, []testCase{
		{name: "valid legacy", errs: create(nil)},
		{name: "valid event about a node in default", errs: create(func(e *corev1.Event) {
			e.InvolvedObject = corev1.ObjectReference{Kind: "Node", Name: "node-1"}
		})},
		{name: "valid new style", errs: create(newStyle)},
		{name: "valid without type", errs: create(func(e *corev1.Event) { e.Type = "" })},

		{name: "name invalid", errs: create(func(e *corev1.Event) { e.Name = "Web 0" }), wantField: "metadata.name", wantType: invalid},
		{name: "namespace mismatch", errs: create(func(e *corev1.Event) { e.InvolvedObject.Namespace = "other" }), wantField: "involvedObject.namespace", wantType: invalid},
		{name: "cluster-scoped object outside default", errs: create(func(e *corev1.Event) {
			e.Namespace = "kube-system"
			e.InvolvedObject = corev1.ObjectReference{Kind: "Node", Name: "node-1"}
		}), wantField: "involvedObject.namespace", wantType: invalid},
		{name: "type unsupported", errs: create(func(e *corev1.Event) { e.Type = "Info" }), wantField: "type", wantType: notSupported},
		{name: "reason too long", errs: create(func(e *corev1.Event) { e.Reason = strings.Repeat("x", 129) }), wantField: "reason", wantType: tooLong},
		{name: "count negative", errs: create(func(e *corev1.Event) { e.Count = -1 }), wantField: "count", wantType: invalid},
		{name: "new style without reporting controller", errs: create(func(e *corev1.Event) {
			newStyle(e)
			e.ReportingController = ""
		}), wantField: "reportingComponent", wantType: required},
		{name: "new style without action", errs: create(func(e *corev1.Event) {
			newStyle(e)
			e.Action = ""
		}), wantField: "action", wantType: required},
		{name: "update valid count bump", errs: func() field.ErrorList {
			old := withRV(coreEvent(nil))
			e := old.DeepCopy()
			e.Count = 2
			return validation.CoreEventUpdate(e, old)
		}},
		{name: "update invalid type", errs: func() field.ErrorList {
			old := withRV(coreEvent(nil))
			e := old.DeepCopy()
			e.Type = "Error"
			return validation.CoreEventUpdate(e, old)
		}, wantField: "type", wantType: notSupported},
	})
}

func eventsV1Event(mutate func(e *eventsv1.Event)) *eventsv1.Event {
	e := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: "web-0.17c2a3b4d5e6f708", Namespace: "default"},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "example.com/netd",
		ReportingInstance:   "netd-node-1",
		Action:              "Programming",
		Reason:              "RulesSynced",
		Regarding:           corev1.ObjectReference{Kind: "Service", Namespace: "default", Name: "web"},
		Note:                "programmed 4 endpoints",
		Type:                corev1.EventTypeNormal,
	}
	if mutate != nil {
		mutate(e)
	}
	return e
}

func TestEventsV1Event(t *testing.T) {
	create := func(mutate func(e *eventsv1.Event)) func() field.ErrorList {
		return func() field.ErrorList { return validation.EventsV1Event(eventsV1Event(mutate)) }
	}
	update := func(mutate func(e *eventsv1.Event)) func() field.ErrorList {
		return func() field.ErrorList {
			old := withRV(eventsV1Event(nil))
			e := old.DeepCopy()
			mutate(e)
			return validation.EventsV1EventUpdate(e, old)
		}
	}
	run(t, []testCase{
		{name: "valid", errs: create(nil)},
		{name: "valid about a node in kube-system", errs: create(func(e *eventsv1.Event) {
			e.Namespace = "kube-system"
			e.Regarding = corev1.ObjectReference{Kind: "Node", Name: "node-1"}
		})},
		{name: "valid series", errs: create(func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(time.Now())}
		})},

		{name: "name invalid", errs: create(func(e *eventsv1.Event) { e.Name = "Bad Name" }), wantField: "metadata.name", wantType: invalid},
		{name: "eventTime missing", errs: create(func(e *eventsv1.Event) { e.EventTime = metav1.MicroTime{} }), wantField: "eventTime", wantType: required},
		{name: "type missing", errs: create(func(e *eventsv1.Event) { e.Type = "" }), wantField: "type", wantType: required},
		{name: "type unsupported", errs: create(func(e *eventsv1.Event) { e.Type = "Info" }), wantField: "type", wantType: notSupported},
		{name: "reason missing", errs: create(func(e *eventsv1.Event) { e.Reason = "" }), wantField: "reason", wantType: required},
		{name: "reportingController not a qualified name", errs: create(func(e *eventsv1.Event) { e.ReportingController = "net d" }), wantField: "reportingController", wantType: invalid},
		{name: "reportingInstance too long", errs: create(func(e *eventsv1.Event) { e.ReportingInstance = strings.Repeat("i", 129) }), wantField: "reportingInstance", wantType: tooLong},
		{name: "note too long", errs: create(func(e *eventsv1.Event) { e.Note = strings.Repeat("n", 1025) }), wantField: "note", wantType: tooLong},
		{name: "cluster-scoped regarding in app namespace", errs: create(func(e *eventsv1.Event) {
			e.Namespace = "apps"
			e.Regarding = corev1.ObjectReference{Kind: "Node", Name: "node-1"}
		}), wantField: "regarding.namespace", wantType: invalid},
		{name: "deprecatedCount set", errs: create(func(e *eventsv1.Event) { e.DeprecatedCount = 3 }), wantField: "deprecatedCount", wantType: invalid},
		{name: "series count too small", errs: create(func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 1, LastObservedTime: metav1.NewMicroTime(time.Now())}
		}), wantField: "series.count", wantType: invalid},
		{name: "series without lastObservedTime", errs: create(func(e *eventsv1.Event) { e.Series = &eventsv1.EventSeries{Count: 2} }), wantField: "series.lastObservedTime", wantType: required},

		{name: "update valid series", errs: update(func(e *eventsv1.Event) {
			e.Series = &eventsv1.EventSeries{Count: 5, LastObservedTime: metav1.NewMicroTime(time.Now())}
		})},
		{name: "update note changed", errs: update(func(e *eventsv1.Event) { e.Note = "other" }), wantField: "note", wantType: invalid},
		{name: "update regarding changed", errs: update(func(e *eventsv1.Event) { e.Regarding.Name = "other" }), wantField: "regarding", wantType: invalid},
		{name: "update bad series", errs: update(func(e *eventsv1.Event) { e.Series = &eventsv1.EventSeries{Count: 0} }), wantField: "series.count", wantType: invalid},
	})
}

// TestDefaultedObjectsValidate checks the contract between the packages:
// whatever defaulting produces from a minimal, sensible request validates.
func TestDefaultedObjectsValidate(t *testing.T) {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dns", Namespace: "kube-system"}, Spec: corev1.ServiceSpec{
		Type:     corev1.ServiceTypeLoadBalancer,
		Selector: map[string]string{"k8s-app": "kube-dns"},
		Ports:    []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", Port: 53}},
	}, Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.53"}}}}}
	defaulting.Service(s)
	if errs := validation.Service(s); len(errs) != 0 {
		t.Errorf("defaulted Service invalid:\n%s", dump(errs))
	}

	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "peers", Namespace: "default"}, Spec: corev1.ServiceSpec{ClusterIP: "None"}}
	defaulting.Service(headless)
	if errs := validation.Service(headless); len(errs) != 0 {
		t.Errorf("defaulted headless Service invalid:\n%s", dump(errs))
	}

	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: corev1.PodSpec{
		HostNetwork: true,
		Containers: []corev1.Container{{Name: "c", Image: "img", Ports: []corev1.ContainerPort{{ContainerPort: 53, Protocol: corev1.ProtocolUDP}},
			StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}}}},
		InitContainers: []corev1.Container{{Name: "i", Image: "img", Ports: []corev1.ContainerPort{{ContainerPort: 9000}}}},
	}, Status: corev1.PodStatus{PodIP: "192.0.2.11", HostIPs: []corev1.HostIP{{IP: "192.0.2.11"}}}}
	defaulting.Pod(p)
	if errs := validation.Pod(p); len(errs) != 0 {
		t.Errorf("defaulted Pod invalid:\n%s", dump(errs))
	}

	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.0.0/24"}}}
	defaulting.Node(n)
	if errs := validation.Node(n); len(errs) != 0 {
		t.Errorf("defaulted Node invalid:\n%s", dump(errs))
	}

	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "dns-1", Namespace: "kube-system"}, AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Port: ptr(int32(53))}}}
	defaulting.EndpointSlice(es)
	if errs := validation.EndpointSlice(es); len(errs) != 0 {
		t.Errorf("defaulted EndpointSlice invalid:\n%s", dump(errs))
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}
	defaulting.Namespace(ns)
	if errs := validation.Namespace(ns); len(errs) != 0 {
		t.Errorf("defaulted Namespace invalid:\n%s", dump(errs))
	}
}
