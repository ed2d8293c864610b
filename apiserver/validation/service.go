package validation

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	supportedServiceTypes = []corev1.ServiceType{
		corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort,
	}
	supportedSessionAffinities       = []corev1.ServiceAffinity{corev1.ServiceAffinityClientIP, corev1.ServiceAffinityNone}
	supportedIPFamilies              = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	supportedIPFamilyPolicies        = []corev1.IPFamilyPolicy{corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack, corev1.IPFamilyPolicySingleStack}
	supportedExternalTrafficPolicy   = []corev1.ServiceExternalTrafficPolicy{corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal}
	supportedInternalTrafficPolicy   = []corev1.ServiceInternalTrafficPolicy{corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal}
	supportedTrafficDistributions    = []string{corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameNode, corev1.ServiceTrafficDistributionPreferSameZone}
	supportedLoadBalancerIPModes     = []corev1.LoadBalancerIPMode{corev1.LoadBalancerIPModeProxy, corev1.LoadBalancerIPModeVIP}
	maxClientIPAffinityTimeoutSecs   = int32(86400) // one day, MaxClientIPServiceAffinitySeconds upstream
	serviceClusterIPPath             = specPath.Child("clusterIP")
	serviceClusterIPsPath            = specPath.Child("clusterIPs")
	serviceIPFamiliesPath            = specPath.Child("ipFamilies")
	serviceIPFamilyPolicyPath        = specPath.Child("ipFamilyPolicy")
	serviceHealthCheckNodePortPath   = specPath.Child("healthCheckNodePort")
	serviceLoadBalancerClassPath     = specPath.Child("loadBalancerClass")
	serviceExternalTrafficPolicyPath = specPath.Child("externalTrafficPolicy")
)

// Service validates a Service on create. Service names are DNS-1035 labels:
// they become DNS names and environment variable names in pods, so they must
// start with a letter.
func Service(s *corev1.Service) field.ErrorList {
	allErrs := validateObjectMetaCreate(&s.ObjectMeta, true, apimachineryvalidation.NameIsDNS1035Label)
	allErrs = append(allErrs, validateServiceSpec(s)...)
	allErrs = append(allErrs, validateLoadBalancerStatus(s)...)
	return allErrs
}

// ServiceUpdate validates an update of a Service. On top of the create
// rules: a cluster IP and the primary IP family never change once assigned
// (every node has rules for them) unless the service moves to or from
// ExternalName; the secondary ones may be added or released (dual-stack
// upgrade/downgrade, releasing requires ipFamilyPolicy SingleStack);
// loadBalancerClass and healthCheckNodePort are fixed while they apply.
func ServiceUpdate(newSvc, oldSvc *corev1.Service) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newSvc.ObjectMeta, &oldSvc.ObjectMeta)
	allErrs = append(allErrs, validateClusterIPsUpdate(newSvc, oldSvc)...)
	allErrs = append(allErrs, validateIPFamiliesUpdate(newSvc, oldSvc)...)

	if newSvc.Spec.Type == corev1.ServiceTypeLoadBalancer && oldSvc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		!apiequality.Semantic.DeepEqual(newSvc.Spec.LoadBalancerClass, oldSvc.Spec.LoadBalancerClass) {
		allErrs = append(allErrs, field.Invalid(serviceLoadBalancerClassPath, newSvc.Spec.LoadBalancerClass, "may not change once set"))
	}
	if needsHealthCheck(newSvc) && needsHealthCheck(oldSvc) &&
		newSvc.Spec.HealthCheckNodePort != oldSvc.Spec.HealthCheckNodePort {
		allErrs = append(allErrs, field.Forbidden(serviceHealthCheckNodePortPath, "field is immutable"))
	}

	allErrs = append(allErrs, validateServiceSpec(newSvc)...)
	allErrs = append(allErrs, validateLoadBalancerStatus(newSvc)...)
	return allErrs
}

// ServiceStatusUpdate validates an update through the services/status
// subresource (load-balancer controllers): the status must be valid and the
// spec unchanged.
func ServiceStatusUpdate(newSvc, oldSvc *corev1.Service) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newSvc.ObjectMeta, &oldSvc.ObjectMeta)
	allErrs = append(allErrs, validateLoadBalancerStatus(newSvc)...)
	if !apiequality.Semantic.DeepEqual(newSvc.Spec, oldSvc.Spec) {
		allErrs = append(allErrs, field.Forbidden(specPath, "may not be changed through the status subresource"))
	}
	return allErrs
}

func isHeadless(s *corev1.Service) bool {
	return s.Spec.ClusterIP == corev1.ClusterIPNone ||
		(len(s.Spec.ClusterIPs) == 1 && s.Spec.ClusterIPs[0] == corev1.ClusterIPNone)
}

// externallyAccessible matches upstream: externalTrafficPolicy applies to
// node ports, load balancers and externalIPs.
func externallyAccessible(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer ||
		s.Spec.Type == corev1.ServiceTypeNodePort ||
		(s.Spec.Type == corev1.ServiceTypeClusterIP && len(s.Spec.ExternalIPs) > 0)
}

// needsHealthCheck: only LoadBalancer services with externalTrafficPolicy
// Local get a health check node port, which the cloud load balancer probes
// to find nodes with local endpoints.
func needsHealthCheck(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func validateServiceSpec(s *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	spec := &s.Spec
	headless := isHeadless(s)

	typePath := specPath.Child("type")
	switch {
	case spec.Type == "":
		allErrs = append(allErrs, field.Required(typePath, ""))
	case !containsValue(supportedServiceTypes, spec.Type):
		allErrs = append(allErrs, field.NotSupported(typePath, spec.Type, supportedServiceTypes))
	}

	// Headless services may have no ports (e.g. to publish DNS records for
	// a StatefulSet); ExternalName services are a CNAME and have no ports
	// of their own.
	if len(spec.Ports) == 0 && !headless && spec.Type != corev1.ServiceTypeExternalName {
		allErrs = append(allErrs, field.Required(specPath.Child("ports"), ""))
	}

	switch spec.Type {
	case corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
		if headless {
			allErrs = append(allErrs, field.Invalid(serviceClusterIPPath, corev1.ClusterIPNone,
				fmt.Sprintf("may not be set to 'None' for %s services", spec.Type)))
		}
	case corev1.ServiceTypeExternalName:
		allErrs = append(allErrs, validateExternalNameFields(s)...)
	}

	allErrs = append(allErrs, validateServicePorts(s)...)

	if spec.Selector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabels(spec.Selector, specPath.Child("selector"))...)
	}

	affinityPath := specPath.Child("sessionAffinity")
	configPath := specPath.Child("sessionAffinityConfig")
	switch spec.SessionAffinity {
	case "":
		allErrs = append(allErrs, field.Required(affinityPath, ""))
	case corev1.ServiceAffinityClientIP:
		allErrs = append(allErrs, validateClientIPAffinityConfig(spec.SessionAffinityConfig, configPath)...)
	case corev1.ServiceAffinityNone:
		if spec.SessionAffinityConfig != nil {
			allErrs = append(allErrs, field.Forbidden(configPath, fmt.Sprintf("must not be set when session affinity is %s", corev1.ServiceAffinityNone)))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(affinityPath, spec.SessionAffinity, supportedSessionAffinities))
	}

	if spec.Type != corev1.ServiceTypeExternalName {
		allErrs = append(allErrs, validateClusterIPFields(s)...)
	}

	ipPath := specPath.Child("externalIPs")
	for i, ip := range spec.ExternalIPs {
		idxPath := ipPath.Index(i)
		if errs := validateIP(ip, idxPath); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
		} else {
			allErrs = append(allErrs, validateNonSpecialIP(ip, idxPath)...)
		}
	}

	if spec.LoadBalancerIP != "" {
		allErrs = append(allErrs, validateIP(spec.LoadBalancerIP, specPath.Child("loadBalancerIP"))...)
	}

	if len(spec.LoadBalancerSourceRanges) > 0 {
		rangesPath := specPath.Child("loadBalancerSourceRanges")
		if spec.Type != corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Forbidden(rangesPath, "may only be used when `type` is 'LoadBalancer'"))
		}
		for i, cidr := range spec.LoadBalancerSourceRanges {
			// Historically accepted with surrounding spaces (it used to be a
			// comma-separated annotation); consumers trim too.
			allErrs = append(allErrs, validateCIDR(strings.TrimSpace(cidr), rangesPath.Index(i))...)
		}
	}

	allocPath := specPath.Child("allocateLoadBalancerNodePorts")
	if spec.Type == corev1.ServiceTypeLoadBalancer {
		if spec.AllocateLoadBalancerNodePorts == nil {
			allErrs = append(allErrs, field.Required(allocPath, ""))
		}
		if spec.LoadBalancerClass != nil {
			allErrs = append(allErrs, validateQualifiedName(*spec.LoadBalancerClass, serviceLoadBalancerClassPath)...)
		}
	} else {
		if spec.AllocateLoadBalancerNodePorts != nil {
			allErrs = append(allErrs, field.Forbidden(allocPath, "may only be used when `type` is 'LoadBalancer'"))
		}
		if spec.LoadBalancerClass != nil {
			allErrs = append(allErrs, field.Forbidden(serviceLoadBalancerClassPath, "may only be used when `type` is 'LoadBalancer'"))
		}
	}

	if !externallyAccessible(s) {
		if spec.ExternalTrafficPolicy != "" {
			allErrs = append(allErrs, field.Invalid(serviceExternalTrafficPolicyPath, spec.ExternalTrafficPolicy,
				"may only be set for externally-accessible services"))
		}
	} else {
		switch {
		case spec.ExternalTrafficPolicy == "":
			allErrs = append(allErrs, field.Required(serviceExternalTrafficPolicyPath, ""))
		case !containsValue(supportedExternalTrafficPolicy, spec.ExternalTrafficPolicy):
			allErrs = append(allErrs, field.NotSupported(serviceExternalTrafficPolicyPath, spec.ExternalTrafficPolicy, supportedExternalTrafficPolicy))
		}
	}

	if spec.HealthCheckNodePort != 0 {
		if !needsHealthCheck(s) {
			allErrs = append(allErrs, field.Invalid(serviceHealthCheckNodePortPath, spec.HealthCheckNodePort,
				"may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		} else {
			allErrs = append(allErrs, validatePortNum(spec.HealthCheckNodePort, serviceHealthCheckNodePortPath)...)
		}
	}

	itpPath := specPath.Child("internalTrafficPolicy")
	if spec.InternalTrafficPolicy == nil {
		// Not required for ExternalName for historical reasons (upstream
		// never checked it there).
		if spec.Type == corev1.ServiceTypeClusterIP || spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Required(itpPath, ""))
		}
	} else if !containsValue(supportedInternalTrafficPolicy, *spec.InternalTrafficPolicy) {
		allErrs = append(allErrs, field.NotSupported(itpPath, *spec.InternalTrafficPolicy, supportedInternalTrafficPolicy))
	}

	if spec.TrafficDistribution != nil && !containsValue(supportedTrafficDistributions, *spec.TrafficDistribution) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("trafficDistribution"), *spec.TrafficDistribution, supportedTrafficDistributions))
	}
	return allErrs
}

// validateExternalNameFields: an ExternalName service is a DNS CNAME. It has
// no cluster IP (or is explicitly "None"), no IP families, and must name a
// valid DNS target.
func validateExternalNameFields(s *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	spec := &s.Spec
	if spec.ClusterIP != "" && spec.ClusterIP != corev1.ClusterIPNone {
		allErrs = append(allErrs, field.Invalid(serviceClusterIPPath, spec.ClusterIP, "must be empty or 'None' for ExternalName services"))
	}
	switch {
	case len(spec.ClusterIPs) == 0:
	case len(spec.ClusterIPs) == 1 && spec.ClusterIPs[0] == corev1.ClusterIPNone && spec.ClusterIP == corev1.ClusterIPNone:
		// The mirror of clusterIP "None".
	default:
		allErrs = append(allErrs, field.Forbidden(serviceClusterIPsPath, "may not be set for ExternalName services"))
	}
	if len(spec.IPFamilies) > 0 {
		allErrs = append(allErrs, field.Forbidden(serviceIPFamiliesPath, "may not be set for ExternalName services"))
	}
	if spec.IPFamilyPolicy != nil {
		allErrs = append(allErrs, field.Forbidden(serviceIPFamilyPolicyPath, "may not be set for ExternalName services"))
	}
	// The value may have a trailing dot to mark it fully qualified.
	namePath := specPath.Child("externalName")
	if cname := trimmedDNSName(spec.ExternalName); cname == "" {
		allErrs = append(allErrs, field.Required(namePath, ""))
	} else {
		allErrs = append(allErrs, validateDNS1123Subdomain(cname, namePath)...)
	}
	return allErrs
}

func validateServicePorts(s *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	spec := &s.Spec
	portsPath := specPath.Child("ports")
	requireName := len(spec.Ports) > 1
	nodePortAllowed := spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer

	type portKey struct {
		port  int32
		proto corev1.Protocol
	}
	names := map[string]bool{}
	ports := map[portKey]bool{}
	nodePorts := map[portKey]bool{}

	for i, p := range spec.Ports {
		idxPath := portsPath.Index(i)

		// Names tell multi-port services' ports apart in EndpointSlices, SRV
		// records and named targetPorts, so they are required then.
		if p.Name == "" {
			if requireName {
				allErrs = append(allErrs, field.Required(idxPath.Child("name"), ""))
			}
		} else {
			allErrs = append(allErrs, validateDNS1123Label(p.Name, idxPath.Child("name"))...)
			if names[p.Name] {
				allErrs = append(allErrs, field.Duplicate(idxPath.Child("name"), p.Name))
			}
			names[p.Name] = true
		}

		allErrs = append(allErrs, validatePortNum(p.Port, idxPath.Child("port"))...)
		allErrs = append(allErrs, validatePortProtocol(p.Protocol, idxPath.Child("protocol"))...)
		allErrs = append(allErrs, validatePortNumOrName(p.TargetPort, idxPath.Child("targetPort"))...)
		if p.AppProtocol != nil {
			allErrs = append(allErrs, validateQualifiedName(*p.AppProtocol, idxPath.Child("appProtocol"))...)
		}

		// Two entries for one (port, protocol) would be one listener with
		// two meanings.
		key := portKey{p.Port, p.Protocol}
		if ports[key] {
			allErrs = append(allErrs, field.Duplicate(idxPath, fmt.Sprintf("%d/%s", p.Port, p.Protocol)))
		}
		ports[key] = true

		if p.NodePort != 0 {
			npPath := idxPath.Child("nodePort")
			if !nodePortAllowed {
				allErrs = append(allErrs, field.Forbidden(npPath, fmt.Sprintf("may not be used when `type` is '%s'", spec.Type)))
			} else {
				allErrs = append(allErrs, validatePortNum(p.NodePort, npPath)...)
			}
			// The same node port may serve TCP and UDP of one service port,
			// but not two ports of the same protocol.
			npKey := portKey{p.NodePort, p.Protocol}
			if nodePorts[npKey] {
				allErrs = append(allErrs, field.Duplicate(npPath, p.NodePort))
			}
			nodePorts[npKey] = true
		}
	}
	return allErrs
}

func validateClientIPAffinityConfig(cfg *corev1.SessionAffinityConfig, fldPath *field.Path) field.ErrorList {
	when := fmt.Sprintf("when session affinity type is %s", corev1.ServiceAffinityClientIP)
	if cfg == nil {
		return field.ErrorList{field.Required(fldPath, when)}
	}
	if cfg.ClientIP == nil {
		return field.ErrorList{field.Required(fldPath.Child("clientIP"), when)}
	}
	timeoutPath := fldPath.Child("clientIP", "timeoutSeconds")
	if cfg.ClientIP.TimeoutSeconds == nil {
		return field.ErrorList{field.Required(timeoutPath, when)}
	}
	if t := *cfg.ClientIP.TimeoutSeconds; t <= 0 || t > maxClientIPAffinityTimeoutSecs {
		return field.ErrorList{field.Invalid(timeoutPath, t, fmt.Sprintf("must be greater than 0 and less than or equal to %d", maxClientIPAffinityTimeoutSecs))}
	}
	return nil
}

// validateClusterIPFields follows ValidateServiceClusterIPsRelatedFields
// upstream plus the ipFamilyPolicy consistency checks of its IP allocator.
func validateClusterIPFields(s *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	spec := &s.Spec

	if spec.ClusterIP != "" && spec.ClusterIP != corev1.ClusterIPNone {
		allErrs = append(allErrs, validateIP(spec.ClusterIP, serviceClusterIPPath)...)
	}

	// clusterIP and clusterIPs are one value seen by old and new clients;
	// defaulting mirrors the singular into the plural.
	if spec.ClusterIP != "" {
		if len(spec.ClusterIPs) == 0 {
			allErrs = append(allErrs, field.Required(serviceClusterIPsPath, ""))
		} else if spec.ClusterIPs[0] != spec.ClusterIP {
			allErrs = append(allErrs, field.Invalid(serviceClusterIPsPath, spec.ClusterIPs, "first value must match `clusterIP`"))
		}
	} else if len(spec.ClusterIPs) != 0 {
		allErrs = append(allErrs, field.Invalid(serviceClusterIPsPath, spec.ClusterIPs, "must be empty when `clusterIP` is not specified"))
	}

	seenFamilies := map[corev1.IPFamily]bool{}
	for i, fam := range spec.IPFamilies {
		if !containsValue(supportedIPFamilies, fam) {
			allErrs = append(allErrs, field.NotSupported(serviceIPFamiliesPath.Index(i), fam, supportedIPFamilies))
		}
		if seenFamilies[fam] {
			allErrs = append(allErrs, field.Duplicate(serviceIPFamiliesPath.Index(i), fam))
		}
		seenFamilies[fam] = true
	}
	if len(spec.IPFamilies) > 2 {
		allErrs = append(allErrs, field.Invalid(serviceIPFamiliesPath, spec.IPFamilies, "may only hold up to 2 values"))
	}

	if spec.IPFamilyPolicy != nil {
		policy := *spec.IPFamilyPolicy
		if !containsValue(supportedIPFamilyPolicies, policy) {
			allErrs = append(allErrs, field.NotSupported(serviceIPFamilyPolicyPath, policy, supportedIPFamilyPolicies))
		}
		if policy == corev1.IPFamilyPolicySingleStack {
			if len(spec.ClusterIPs) == 2 {
				allErrs = append(allErrs, field.Invalid(serviceIPFamilyPolicyPath, policy,
					"must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
			}
			if len(spec.IPFamilies) == 2 {
				allErrs = append(allErrs, field.Invalid(serviceIPFamilyPolicyPath, policy,
					"must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"))
			}
		}
	}

	ipsValid := true
	for i, ip := range spec.ClusterIPs {
		if i == 0 && ip == corev1.ClusterIPNone {
			if len(spec.ClusterIPs) > 1 {
				ipsValid = false
				allErrs = append(allErrs, field.Invalid(serviceClusterIPsPath, spec.ClusterIPs, "'None' must be the first and only value"))
			}
			continue
		}
		if errs := validateIP(ip, serviceClusterIPsPath.Index(i)); len(errs) > 0 {
			ipsValid = false
			allErrs = append(allErrs, errs...)
		}
	}
	if !ipsValid {
		// Family checks on invalid input only produce confusing errors.
		return allErrs
	}
	allErrs = append(allErrs, validateDualStackList(spec.ClusterIPs, ipFamilyOf, "IP", serviceClusterIPsPath)...)

	// Each cluster IP belongs to the family at the same position.
	if !isHeadless(s) {
		for i, ip := range spec.ClusterIPs {
			if i >= len(spec.IPFamilies) {
				break
			}
			if fam := ipFamilyOf(ip); containsValue(supportedIPFamilies, spec.IPFamilies[i]) && fam != spec.IPFamilies[i] {
				allErrs = append(allErrs, field.Invalid(serviceClusterIPsPath.Index(i), ip,
					fmt.Sprintf("expected an %s value as indicated by `ipFamilies[%d]`", spec.IPFamilies[i], i)))
			}
		}
	}
	return allErrs
}

// validateClusterIPsUpdate follows validateUpgradeDowngradeClusterIPs
// upstream: the primary cluster IP never changes; a secondary may be added,
// or released with ipFamilyPolicy SingleStack. Moving to or from
// ExternalName releases or allocates everything, and headless stays
// headless freely.
func validateClusterIPsUpdate(newSvc, oldSvc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	if newSvc.Spec.Type == corev1.ServiceTypeExternalName || oldSvc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if isHeadless(newSvc) && isHeadless(oldSvc) {
		return nil
	}
	oldIPs, newIPs := oldSvc.Spec.ClusterIPs, newSvc.Spec.ClusterIPs
	const changed = "may not change once set"

	// clusterIP itself needs no check: create-time rules tie it to
	// clusterIPs[0].
	switch {
	case len(oldIPs) == len(newIPs):
		for i := range oldIPs {
			if oldIPs[i] != newIPs[i] {
				allErrs = append(allErrs, field.Invalid(serviceClusterIPsPath.Index(i), newIPs, changed))
			}
		}
	case len(oldIPs) > len(newIPs):
		if len(newIPs) == 0 {
			allErrs = append(allErrs, field.Invalid(serviceClusterIPsPath.Index(0), newIPs, "primary clusterIP can not be unset"))
		} else if newIPs[0] != oldIPs[0] {
			allErrs = append(allErrs, field.Invalid(serviceClusterIPsPath.Index(0), newIPs, changed))
		}
		if len(newIPs) == 1 && !isPolicy(newSvc, corev1.IPFamilyPolicySingleStack) {
			allErrs = append(allErrs, field.Invalid(serviceIPFamilyPolicyPath, newSvc.Spec.IPFamilyPolicy,
				"must be set to 'SingleStack' when releasing the secondary clusterIP"))
		}
	default: // an IP was added
		if len(oldIPs) > 0 && newIPs[0] != oldIPs[0] {
			allErrs = append(allErrs, field.Invalid(serviceClusterIPsPath.Index(0), newIPs, changed))
		}
	}
	return allErrs
}

// validateIPFamiliesUpdate follows validateUpgradeDowngradeIPFamilies
// upstream: ipFamilies[0] is immutable outside ExternalName/headless changes.
func validateIPFamiliesUpdate(newSvc, oldSvc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	if newSvc.Spec.Type == corev1.ServiceTypeExternalName || oldSvc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	// Headless services have no IPs of a family to keep stable.
	if isHeadless(newSvc) || isHeadless(oldSvc) {
		return nil
	}
	oldFams, newFams := oldSvc.Spec.IPFamilies, newSvc.Spec.IPFamilies
	const changed = "may not change once set"
	switch {
	case len(oldFams) == len(newFams):
		for i := range oldFams {
			if oldFams[i] != newFams[i] {
				allErrs = append(allErrs, field.Invalid(serviceIPFamiliesPath.Index(i), newFams, changed))
			}
		}
	case len(oldFams) > len(newFams):
		if len(newFams) == 0 {
			// The allocator would refill it from the cluster default, which
			// need not be the family the service has.
			allErrs = append(allErrs, field.Invalid(serviceIPFamiliesPath.Index(0), newFams, "primary ipFamily can not be unset"))
		} else if newFams[0] != oldFams[0] {
			allErrs = append(allErrs, field.Invalid(serviceIPFamiliesPath.Index(0), newFams, changed))
		}
		if len(newFams) == 1 && !isPolicy(newSvc, corev1.IPFamilyPolicySingleStack) {
			allErrs = append(allErrs, field.Invalid(serviceIPFamilyPolicyPath, newSvc.Spec.IPFamilyPolicy,
				"must be set to 'SingleStack' when releasing the secondary ipFamily"))
		}
	default:
		if len(oldFams) > 0 && newFams[0] != oldFams[0] {
			allErrs = append(allErrs, field.Invalid(serviceIPFamiliesPath.Index(0), newFams, changed))
		}
	}
	return allErrs
}

func isPolicy(s *corev1.Service, p corev1.IPFamilyPolicy) bool {
	return s.Spec.IPFamilyPolicy != nil && *s.Spec.IPFamilyPolicy == p
}

// validateLoadBalancerStatus follows ValidateLoadBalancerStatus upstream:
// what load-balancer controllers report is programmed by node agents
// (e.g. ipMode VIP makes kube-proxy capture the address locally).
func validateLoadBalancerStatus(s *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	ingressPath := statusPath.Child("loadBalancer", "ingress")
	if len(s.Status.LoadBalancer.Ingress) > 0 && s.Spec.Type != corev1.ServiceTypeLoadBalancer {
		allErrs = append(allErrs, field.Forbidden(ingressPath, "may only be used when `spec.type` is 'LoadBalancer'"))
	}
	for i, ing := range s.Status.LoadBalancer.Ingress {
		idxPath := ingressPath.Index(i)
		if ing.IP != "" {
			allErrs = append(allErrs, validateIP(ing.IP, idxPath.Child("ip"))...)
		}
		if ing.IPMode != nil {
			if ing.IP == "" {
				allErrs = append(allErrs, field.Forbidden(idxPath.Child("ipMode"), "may only be set when `ip` is set"))
			} else if !containsValue(supportedLoadBalancerIPModes, *ing.IPMode) {
				allErrs = append(allErrs, field.NotSupported(idxPath.Child("ipMode"), *ing.IPMode, supportedLoadBalancerIPModes))
			}
		} else if ing.IP != "" {
			// Defaulting sets VIP; without a mode consumers cannot tell how
			// to program the address.
			allErrs = append(allErrs, field.Required(idxPath.Child("ipMode"), "must be specified when `ip` is set"))
		}
		if ing.Hostname != "" {
			allErrs = append(allErrs, validateDNS1123Subdomain(ing.Hostname, idxPath.Child("hostname"))...)
			if ipFamilyOf(ing.Hostname) != "" {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("hostname"), ing.Hostname, "must be a DNS name, not an IP address"))
			}
		}
		for j, ps := range ing.Ports {
			psPath := idxPath.Child("ports").Index(j)
			allErrs = append(allErrs, validatePortNum(ps.Port, psPath.Child("port"))...)
			allErrs = append(allErrs, validatePortProtocol(ps.Protocol, psPath.Child("protocol"))...)
			if ps.Error != nil {
				allErrs = append(allErrs, validateQualifiedName(*ps.Error, psPath.Child("error"))...)
			}
		}
	}
	allErrs = append(allErrs, metav1validation.ValidateConditions(s.Status.Conditions, statusPath.Child("conditions"))...)
	return allErrs
}
