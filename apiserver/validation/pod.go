package validation

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Limits kube-apiserver applies to spec.dnsConfig (they mirror the resolver
// limits of glibc, which is what ends up reading the generated resolv.conf).
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
)

var (
	supportedRestartPolicies  = []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure}
	supportedDNSPolicies      = []corev1.DNSPolicy{corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone}
	supportedPullPolicies     = []corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}
	supportedTermMsgPolicies  = []corev1.TerminationMessagePolicy{corev1.TerminationMessageFallbackToLogsOnError, corev1.TerminationMessageReadFile}
	supportedContainerRestart = []corev1.ContainerRestartPolicy{corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyNever, corev1.ContainerRestartPolicyOnFailure}
	supportedURISchemes       = []corev1.URIScheme{corev1.URISchemeHTTP, corev1.URISchemeHTTPS}
	supportedPodPhases        = []corev1.PodPhase{corev1.PodFailed, corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodUnknown}
)

// podUpdateForbiddenMsg names what a pod update may change; everything else
// in spec is fixed once the pod exists, because the node running it would
// not act on the change.
const podUpdateForbiddenMsg = "pod updates may not change fields other than `spec.containers[*].image`, " +
	"`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations) " +
	"or `spec.terminationGracePeriodSeconds`"

// Pod validates a Pod on create.
func Pod(p *corev1.Pod) field.ErrorList {
	allErrs := validateObjectMetaCreate(&p.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	allErrs = append(allErrs, validatePodSpec(&p.Spec, specPath)...)
	if len(p.Spec.EphemeralContainers) > 0 {
		// Ephemeral containers are added to running pods for debugging, never
		// part of the pod as created.
		allErrs = append(allErrs, field.Forbidden(specPath.Child("ephemeralContainers"), "cannot be set on create"))
	}
	allErrs = append(allErrs, validatePodStatus(&p.Status)...)
	return allErrs
}

// PodUpdate validates an update of a Pod through the main resource. Only
// container images, activeDeadlineSeconds (set or shortened),
// tolerations (added) and terminationGracePeriodSeconds may change in spec.
// spec.nodeName in particular cannot be set here: pods are assigned to nodes
// through the binding subresource (see Binding).
func PodUpdate(newPod, oldPod *corev1.Pod) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newPod.ObjectMeta, &oldPod.ObjectMeta)
	allErrs = append(allErrs, validatePodSpec(&newPod.Spec, specPath)...)
	allErrs = append(allErrs, validatePodStatus(&newPod.Status)...)

	if newPod.Spec.NodeName != oldPod.Spec.NodeName {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("nodeName"),
			"may not be changed by an update; pods are assigned to a node through the binding subresource"))
	}

	allErrs = append(allErrs, validateActiveDeadlineUpdate(newPod.Spec.ActiveDeadlineSeconds, oldPod.Spec.ActiveDeadlineSeconds)...)
	allErrs = append(allErrs, validateOnlyAddedTolerations(newPod.Spec.Tolerations, oldPod.Spec.Tolerations, specPath.Child("tolerations"))...)

	// Copy the mutable fields from the old spec; whatever still differs was
	// changed illegally.
	munged := newPod.Spec.DeepCopy()
	if len(munged.Containers) == len(oldPod.Spec.Containers) {
		for i := range munged.Containers {
			munged.Containers[i].Image = oldPod.Spec.Containers[i].Image
		}
	}
	if len(munged.InitContainers) == len(oldPod.Spec.InitContainers) {
		for i := range munged.InitContainers {
			munged.InitContainers[i].Image = oldPod.Spec.InitContainers[i].Image
		}
	}
	munged.ActiveDeadlineSeconds = oldPod.Spec.ActiveDeadlineSeconds
	munged.Tolerations = oldPod.Spec.Tolerations
	munged.TerminationGracePeriodSeconds = oldPod.Spec.TerminationGracePeriodSeconds
	munged.NodeName = oldPod.Spec.NodeName // reported above with a precise path
	if !apiequality.Semantic.DeepEqual(*munged, oldPod.Spec) {
		allErrs = append(allErrs, field.Forbidden(specPath, podUpdateForbiddenMsg))
	}
	return allErrs
}

// PodStatusUpdate validates an update through the pods/status subresource:
// the status must be valid and the spec unchanged (status writers such as
// node agents must not be able to alter what the pod runs).
func PodStatusUpdate(newPod, oldPod *corev1.Pod) field.ErrorList {
	allErrs := validateObjectMetaUpdate(&newPod.ObjectMeta, &oldPod.ObjectMeta)
	allErrs = append(allErrs, validatePodStatus(&newPod.Status)...)
	if isTerminalPhase(oldPod.Status.Phase) && newPod.Status.Phase != oldPod.Status.Phase {
		allErrs = append(allErrs, field.Forbidden(statusPath.Child("phase"),
			fmt.Sprintf("cannot transition from terminal phase %q to %q", oldPod.Status.Phase, newPod.Status.Phase)))
	}
	if !apiequality.Semantic.DeepEqual(newPod.Spec, oldPod.Spec) {
		allErrs = append(allErrs, field.Forbidden(specPath, "may not be changed through the status subresource"))
	}
	return allErrs
}

// Binding validates a pods/binding request. Target must name a Node.
// Whether the pod may be bound (not yet bound, not being deleted) depends on
// the stored pod and is a conflict, not a validation error, so the server
// checks that itself.
func Binding(b *corev1.Binding) field.ErrorList {
	allErrs := validateObjectMetaCreate(&b.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain)
	targetPath := field.NewPath("target")
	if b.Target.Kind != "" && b.Target.Kind != "Node" {
		allErrs = append(allErrs, field.NotSupported(targetPath.Child("kind"), b.Target.Kind, []string{"Node", "<empty>"}))
	}
	if b.Target.Name == "" {
		allErrs = append(allErrs, field.Required(targetPath.Child("name"), ""))
	} else {
		allErrs = append(allErrs, validateNodeName(b.Target.Name, targetPath.Child("name"))...)
	}
	return allErrs
}

func isTerminalPhase(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

func validatePodSpec(spec *corev1.PodSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList

	containersPath := fldPath.Child("containers")
	initPath := fldPath.Child("initContainers")
	ephemeralPath := fldPath.Child("ephemeralContainers")

	if len(spec.Containers) == 0 {
		allErrs = append(allErrs, field.Required(containersPath, ""))
	}

	// Container names are unique across all kinds of containers: they key
	// container statuses, logs and exec.
	names := map[string]bool{}
	checkName := func(name string, fldPath *field.Path) {
		if name == "" {
			return
		}
		if names[name] {
			allErrs = append(allErrs, field.Duplicate(fldPath, name))
		}
		names[name] = true
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		idxPath := containersPath.Index(i)
		checkName(c.Name, idxPath.Child("name"))
		allErrs = append(allErrs, validateContainer(c, containerRegular, idxPath)...)
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		idxPath := initPath.Index(i)
		checkName(c.Name, idxPath.Child("name"))
		allErrs = append(allErrs, validateContainer(c, containerInit, idxPath)...)
	}
	for i := range spec.EphemeralContainers {
		c := (*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon)
		idxPath := ephemeralPath.Index(i)
		checkName(c.Name, idxPath.Child("name"))
		allErrs = append(allErrs, validateContainer(c, containerEphemeral, idxPath)...)
	}

	allErrs = append(allErrs, validateHostPortConflicts(spec.Containers, containersPath)...)

	if spec.HostNetwork {
		// With host networking there is no port mapping: the process binds
		// the host's port directly.
		allErrs = append(allErrs, validateHostNetworkPorts(spec.Containers, containersPath)...)
		allErrs = append(allErrs, validateHostNetworkPorts(spec.InitContainers, initPath)...)
	}

	switch {
	case spec.RestartPolicy == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("restartPolicy"), ""))
	case !containsValue(supportedRestartPolicies, spec.RestartPolicy):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("restartPolicy"), spec.RestartPolicy, supportedRestartPolicies))
	}

	switch {
	case spec.DNSPolicy == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("dnsPolicy"), ""))
	case !containsValue(supportedDNSPolicies, spec.DNSPolicy):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("dnsPolicy"), spec.DNSPolicy, supportedDNSPolicies))
	}
	allErrs = append(allErrs, validateDNSConfig(spec.DNSPolicy, spec.DNSConfig, fldPath)...)

	if spec.NodeName != "" {
		allErrs = append(allErrs, validateNodeName(spec.NodeName, fldPath.Child("nodeName"))...)
	}
	if spec.Hostname != "" {
		allErrs = append(allErrs, validateDNS1123Label(spec.Hostname, fldPath.Child("hostname"))...)
	}
	if spec.Subdomain != "" {
		allErrs = append(allErrs, validateDNS1123Label(spec.Subdomain, fldPath.Child("subdomain"))...)
	}
	if spec.ServiceAccountName != "" {
		allErrs = append(allErrs, validateDNS1123Subdomain(spec.ServiceAccountName, fldPath.Child("serviceAccountName"))...)
	}
	if spec.SchedulerName != "" {
		allErrs = append(allErrs, validateDNS1123Subdomain(spec.SchedulerName, fldPath.Child("schedulerName"))...)
	}
	allErrs = append(allErrs, validateLabels(spec.NodeSelector, fldPath.Child("nodeSelector"))...)
	allErrs = append(allErrs, validateTolerations(spec.Tolerations, fldPath.Child("tolerations"))...)

	aliasPath := fldPath.Child("hostAliases")
	for i, alias := range spec.HostAliases {
		idxPath := aliasPath.Index(i)
		allErrs = append(allErrs, validateIP(alias.IP, idxPath.Child("ip"))...)
		for j, h := range alias.Hostnames {
			allErrs = append(allErrs, validateDNS1123Subdomain(h, idxPath.Child("hostnames").Index(j))...)
		}
	}

	for i, gate := range spec.ReadinessGates {
		allErrs = append(allErrs, validateQualifiedName(string(gate.ConditionType), fldPath.Child("readinessGates").Index(i).Child("conditionType"))...)
	}

	if spec.TerminationGracePeriodSeconds != nil {
		allErrs = append(allErrs, validateNonnegative(*spec.TerminationGracePeriodSeconds, fldPath.Child("terminationGracePeriodSeconds"))...)
	}
	if spec.ActiveDeadlineSeconds != nil {
		if v := *spec.ActiveDeadlineSeconds; v < 1 || v > math.MaxUint32 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("activeDeadlineSeconds"), v, utilvalidation.InclusiveRangeError(1, math.MaxUint32)))
		}
	}
	return allErrs
}

type containerKind int

const (
	containerRegular containerKind = iota
	containerInit
	containerEphemeral
)

func validateContainer(c *corev1.Container, kind containerKind, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList

	if c.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	} else {
		allErrs = append(allErrs, validateDNS1123Label(c.Name, fldPath.Child("name"))...)
	}

	if c.Image == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("image"), ""))
	} else if c.Image != strings.TrimSpace(c.Image) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("image"), c.Image, "must not have leading or trailing whitespace"))
	}

	switch {
	case c.ImagePullPolicy == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("imagePullPolicy"), ""))
	case !containsValue(supportedPullPolicies, c.ImagePullPolicy):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("imagePullPolicy"), c.ImagePullPolicy, supportedPullPolicies))
	}
	switch {
	case c.TerminationMessagePolicy == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("terminationMessagePolicy"), ""))
	case !containsValue(supportedTermMsgPolicies, c.TerminationMessagePolicy):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("terminationMessagePolicy"), c.TerminationMessagePolicy, supportedTermMsgPolicies))
	}

	restartable := false // a sidecar: an init container that keeps running
	if c.RestartPolicy != nil {
		if !containsValue(supportedContainerRestart, *c.RestartPolicy) {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("restartPolicy"), *c.RestartPolicy, supportedContainerRestart))
		}
		restartable = kind == containerInit && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	}

	switch kind {
	case containerEphemeral:
		// Ephemeral containers are not part of the pod's serving surface:
		// nothing may route to them or wait on them.
		for _, f := range []struct {
			set  bool
			name string
		}{
			{len(c.Ports) > 0, "ports"},
			{c.LivenessProbe != nil, "livenessProbe"},
			{c.ReadinessProbe != nil, "readinessProbe"},
			{c.StartupProbe != nil, "startupProbe"},
			{c.Lifecycle != nil, "lifecycle"},
		} {
			if f.set {
				allErrs = append(allErrs, field.Forbidden(fldPath.Child(f.name), "may not be set for ephemeral containers"))
			}
		}
	case containerInit:
		if !restartable {
			// A run-to-completion init container is never "ready" or "live".
			for _, f := range []struct {
				set  bool
				name string
			}{
				{c.LivenessProbe != nil, "livenessProbe"},
				{c.ReadinessProbe != nil, "readinessProbe"},
				{c.StartupProbe != nil, "startupProbe"},
				{c.Lifecycle != nil, "lifecycle"},
			} {
				if f.set {
					allErrs = append(allErrs, field.Forbidden(fldPath.Child(f.name), "may not be set for init containers without restartPolicy=Always"))
				}
			}
		}
	}

	allErrs = append(allErrs, validateContainerPorts(c.Ports, fldPath.Child("ports"))...)
	allErrs = append(allErrs, validateProbe(c.LivenessProbe, probeLiveness, fldPath.Child("livenessProbe"))...)
	allErrs = append(allErrs, validateProbe(c.ReadinessProbe, probeReadiness, fldPath.Child("readinessProbe"))...)
	allErrs = append(allErrs, validateProbe(c.StartupProbe, probeStartup, fldPath.Child("startupProbe"))...)
	if c.Lifecycle != nil {
		allErrs = append(allErrs, validateLifecycleHandler(c.Lifecycle.PostStart, fldPath.Child("lifecycle", "postStart"))...)
		allErrs = append(allErrs, validateLifecycleHandler(c.Lifecycle.PreStop, fldPath.Child("lifecycle", "preStop"))...)
	}
	return allErrs
}

// validateContainerPorts follows validateContainerPorts upstream. Port names
// are IANA service names (they are what Services' named targetPorts and
// SRV records refer to), unique within the container.
func validateContainerPorts(ports []corev1.ContainerPort, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names := map[string]bool{}
	for i, p := range ports {
		idxPath := fldPath.Index(i)
		if p.Name != "" {
			if msgs := utilvalidation.IsValidPortName(p.Name); len(msgs) > 0 {
				allErrs = append(allErrs, invalid(idxPath.Child("name"), p.Name, msgs)...)
			} else if names[p.Name] {
				allErrs = append(allErrs, field.Duplicate(idxPath.Child("name"), p.Name))
			} else {
				names[p.Name] = true
			}
		}
		if p.ContainerPort == 0 {
			allErrs = append(allErrs, field.Required(idxPath.Child("containerPort"), ""))
		} else {
			allErrs = append(allErrs, validatePortNum(p.ContainerPort, idxPath.Child("containerPort"))...)
		}
		if p.HostPort != 0 {
			allErrs = append(allErrs, validatePortNum(p.HostPort, idxPath.Child("hostPort"))...)
		}
		if p.HostIP != "" {
			allErrs = append(allErrs, validateIP(p.HostIP, idxPath.Child("hostIP"))...)
		}
		allErrs = append(allErrs, validatePortProtocol(p.Protocol, idxPath.Child("protocol"))...)
	}
	return allErrs
}

// validateHostPortConflicts refuses two containers of one pod claiming the
// same host port: the second could never bind it.
func validateHostPortConflicts(containers []corev1.Container, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := map[string]bool{}
	for ci, c := range containers {
		for pi, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			key := fmt.Sprintf("%s/%s/%d", p.HostIP, p.Protocol, p.HostPort)
			if seen[key] {
				allErrs = append(allErrs, field.Duplicate(fldPath.Index(ci).Child("ports").Index(pi).Child("hostPort"), key))
			}
			seen[key] = true
		}
	}
	return allErrs
}

func validateHostNetworkPorts(containers []corev1.Container, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for ci, c := range containers {
		for pi, p := range c.Ports {
			if p.HostPort != p.ContainerPort {
				allErrs = append(allErrs, field.Invalid(fldPath.Index(ci).Child("ports").Index(pi).Child("hostPort"), p.HostPort,
					"must match `containerPort` when `hostNetwork` is true"))
			}
		}
	}
	return allErrs
}

type probeKind int

const (
	probeLiveness probeKind = iota
	probeReadiness
	probeStartup
)

func validateProbe(p *corev1.Probe, kind probeKind, fldPath *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var allErrs field.ErrorList

	var set []string
	if p.Exec != nil {
		set = append(set, "exec")
		allErrs = append(allErrs, validateExecAction(p.Exec, fldPath.Child("exec"))...)
	}
	if p.HTTPGet != nil {
		set = append(set, "httpGet")
		allErrs = append(allErrs, validateHTTPGetAction(p.HTTPGet, fldPath.Child("httpGet"))...)
	}
	if p.TCPSocket != nil {
		set = append(set, "tcpSocket")
		allErrs = append(allErrs, validatePortNumOrName(p.TCPSocket.Port, fldPath.Child("tcpSocket", "port"))...)
	}
	if p.GRPC != nil {
		set = append(set, "grpc")
		allErrs = append(allErrs, validatePortNum(p.GRPC.Port, fldPath.Child("grpc", "port"))...)
	}
	allErrs = append(allErrs, validateOneHandler(set, fldPath)...)

	allErrs = append(allErrs, validateNonnegative(int64(p.InitialDelaySeconds), fldPath.Child("initialDelaySeconds"))...)
	// Zero is replaced by defaulting; what is left must be usable timing.
	allErrs = append(allErrs, validatePositive(int64(p.TimeoutSeconds), fldPath.Child("timeoutSeconds"))...)
	allErrs = append(allErrs, validatePositive(int64(p.PeriodSeconds), fldPath.Child("periodSeconds"))...)
	allErrs = append(allErrs, validatePositive(int64(p.SuccessThreshold), fldPath.Child("successThreshold"))...)
	allErrs = append(allErrs, validatePositive(int64(p.FailureThreshold), fldPath.Child("failureThreshold"))...)

	if (kind == probeLiveness || kind == probeStartup) && p.SuccessThreshold != 1 {
		// One success is all "alive"/"started" can mean.
		allErrs = append(allErrs, field.Invalid(fldPath.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
	}
	if p.TerminationGracePeriodSeconds != nil {
		if kind == probeReadiness {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *p.TerminationGracePeriodSeconds,
				"must not be set for readinessProbes"))
		} else if *p.TerminationGracePeriodSeconds <= 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *p.TerminationGracePeriodSeconds,
				"must be greater than 0"))
		}
	}
	return allErrs
}

func validateLifecycleHandler(h *corev1.LifecycleHandler, fldPath *field.Path) field.ErrorList {
	if h == nil {
		return nil
	}
	var allErrs field.ErrorList
	var set []string
	if h.Exec != nil {
		set = append(set, "exec")
		allErrs = append(allErrs, validateExecAction(h.Exec, fldPath.Child("exec"))...)
	}
	if h.HTTPGet != nil {
		set = append(set, "httpGet")
		allErrs = append(allErrs, validateHTTPGetAction(h.HTTPGet, fldPath.Child("httpGet"))...)
	}
	if h.TCPSocket != nil {
		set = append(set, "tcpSocket")
		allErrs = append(allErrs, validatePortNumOrName(h.TCPSocket.Port, fldPath.Child("tcpSocket", "port"))...)
	}
	if h.Sleep != nil {
		set = append(set, "sleep")
		allErrs = append(allErrs, validateNonnegative(h.Sleep.Seconds, fldPath.Child("sleep", "seconds"))...)
	}
	allErrs = append(allErrs, validateOneHandler(set, fldPath)...)
	return allErrs
}

func validateOneHandler(set []string, fldPath *field.Path) field.ErrorList {
	switch len(set) {
	case 0:
		return field.ErrorList{field.Required(fldPath, "must specify a handler type")}
	case 1:
		return nil
	default:
		return field.ErrorList{field.Forbidden(fldPath.Child(set[1]), "may not specify more than 1 handler type")}
	}
}

func validateExecAction(e *corev1.ExecAction, fldPath *field.Path) field.ErrorList {
	if len(e.Command) == 0 {
		return field.ErrorList{field.Required(fldPath.Child("command"), "")}
	}
	return nil
}

func validateHTTPGetAction(h *corev1.HTTPGetAction, fldPath *field.Path) field.ErrorList {
	allErrs := validatePortNumOrName(h.Port, fldPath.Child("port"))
	switch {
	case h.Scheme == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("scheme"), ""))
	case !containsValue(supportedURISchemes, h.Scheme):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("scheme"), h.Scheme, supportedURISchemes))
	}
	for i, hdr := range h.HTTPHeaders {
		allErrs = append(allErrs, invalid(fldPath.Child("httpHeaders").Index(i).Child("name"), hdr.Name, utilvalidation.IsHTTPHeaderName(hdr.Name))...)
	}
	return allErrs
}

// validateDNSConfig follows validatePodDNSConfig upstream.
func validateDNSConfig(policy corev1.DNSPolicy, cfg *corev1.PodDNSConfig, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	cfgPath := fldPath.Child("dnsConfig")
	if policy == corev1.DNSNone {
		if cfg == nil {
			return field.ErrorList{field.Required(cfgPath, fmt.Sprintf("must provide `dnsConfig` when `dnsPolicy` is %s", corev1.DNSNone))}
		}
		if len(cfg.Nameservers) == 0 {
			allErrs = append(allErrs, field.Required(cfgPath.Child("nameservers"),
				fmt.Sprintf("must provide at least one DNS nameserver when `dnsPolicy` is %s", corev1.DNSNone)))
		}
	}
	if cfg == nil {
		return allErrs
	}

	nsPath := cfgPath.Child("nameservers")
	if len(cfg.Nameservers) > maxDNSNameservers {
		allErrs = append(allErrs, field.Invalid(nsPath, cfg.Nameservers, fmt.Sprintf("must not have more than %v nameservers", maxDNSNameservers)))
	}
	for i, ns := range cfg.Nameservers {
		allErrs = append(allErrs, validateIP(ns, nsPath.Index(i))...)
	}

	searchPath := cfgPath.Child("searches")
	if len(cfg.Searches) > maxDNSSearchPaths {
		allErrs = append(allErrs, field.Invalid(searchPath, cfg.Searches, fmt.Sprintf("must not have more than %v search paths", maxDNSSearchPaths)))
	}
	if n := len(strings.Join(cfg.Searches, " ")); n > maxDNSSearchListChars {
		allErrs = append(allErrs, field.Invalid(searchPath, cfg.Searches, fmt.Sprintf("must not have more than %v characters (including spaces) in the search list", maxDNSSearchListChars)))
	}
	for i, s := range cfg.Searches {
		if s == "." {
			// "." alone means "no search domain" and is valid resolv.conf.
			continue
		}
		allErrs = append(allErrs, validateDNS1123Subdomain(trimmedDNSName(s), searchPath.Index(i))...)
	}
	for i, opt := range cfg.Options {
		if opt.Name == "" {
			allErrs = append(allErrs, field.Required(cfgPath.Child("options").Index(i).Child("name"), "must not be empty"))
		}
	}
	return allErrs
}

func validatePodStatus(status *corev1.PodStatus) field.ErrorList {
	var allErrs field.ErrorList
	if status.Phase != "" && !containsValue(supportedPodPhases, status.Phase) {
		allErrs = append(allErrs, field.NotSupported(statusPath.Child("phase"), status.Phase, supportedPodPhases))
	}
	if status.NominatedNodeName != "" {
		allErrs = append(allErrs, validateNodeName(status.NominatedNodeName, statusPath.Child("nominatedNodeName"))...)
	}

	podIPs := make([]string, 0, len(status.PodIPs))
	for _, ip := range status.PodIPs {
		podIPs = append(podIPs, ip.IP)
	}
	allErrs = append(allErrs, validateIPPair(status.PodIP, podIPs, statusPath.Child("podIP"), statusPath.Child("podIPs"), "podIP")...)

	hostIPs := make([]string, 0, len(status.HostIPs))
	for _, ip := range status.HostIPs {
		hostIPs = append(hostIPs, ip.IP)
	}
	allErrs = append(allErrs, validateIPPair(status.HostIP, hostIPs, statusPath.Child("hostIP"), statusPath.Child("hostIPs"), "hostIP")...)
	return allErrs
}

// validateIPPair checks a legacy singular IP field and its dual-stack
// plural: all valid, at most one per family, and the primary in step.
// Paths of the plural point into the list of {ip: ...} objects.
func validateIPPair(single string, plural []string, singlePath, pluralPath *field.Path, singleName string) field.ErrorList {
	var allErrs field.ErrorList
	if single != "" {
		allErrs = append(allErrs, validateIP(single, singlePath)...)
	}
	valid := true
	for i, ip := range plural {
		if errs := validateIP(ip, pluralPath.Index(i).Child("ip")); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			valid = false
		}
	}
	if valid {
		allErrs = append(allErrs, validateDualStackList(plural, ipFamilyOf, "IP", pluralPath)...)
	}
	if single != "" && len(plural) > 0 && single != plural[0] {
		allErrs = append(allErrs, field.Invalid(pluralPath.Index(0).Child("ip"), plural[0], fmt.Sprintf("must match `%s`", singleName)))
	}
	return allErrs
}

// validateActiveDeadlineUpdate: the deadline may be added or shortened, but
// not extended or removed - controllers rely on it only ever getting closer.
func validateActiveDeadlineUpdate(newVal, oldVal *int64) field.ErrorList {
	fldPath := specPath.Child("activeDeadlineSeconds")
	if newVal == nil {
		if oldVal != nil {
			return field.ErrorList{field.Invalid(fldPath, newVal, "must not update from a positive integer to nil value")}
		}
		return nil
	}
	if oldVal != nil && *newVal > *oldVal {
		return field.ErrorList{field.Invalid(fldPath, *newVal, "must be less than or equal to previous value")}
	}
	return nil
}

// validateOnlyAddedTolerations follows upstream: existing tolerations stay
// (their tolerationSeconds may change), new ones may be added.
func validateOnlyAddedTolerations(newTolerations, oldTolerations []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	for _, old := range oldTolerations {
		found := false
		for _, nt := range newTolerations {
			o := *old.DeepCopy()
			o.TolerationSeconds = nt.TolerationSeconds
			if apiequality.Semantic.DeepEqual(o, nt) {
				found = true
				break
			}
		}
		if !found {
			return field.ErrorList{field.Forbidden(fldPath, "existing toleration can not be modified except its tolerationSeconds")}
		}
	}
	return nil
}

func containsValue[T comparable](values []T, v T) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}
