package defaulting

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Default values that kube-apiserver applies and that are not exported as
// constants by k8s.io/api.
const (
	// defaultProbeTimeoutSeconds etc. are the SetDefaults_Probe values.
	defaultProbeTimeoutSeconds   = 1
	defaultProbePeriodSeconds    = 10
	defaultProbeSuccessThreshold = 1
	defaultProbeFailureThreshold = 3

	// defaultTolerationSeconds is the default of kube-apiserver's
	// --default-not-ready-toleration-seconds and
	// --default-unreachable-toleration-seconds flags.
	defaultTolerationSeconds int64 = 300
)

// Service sets the defaults kube-apiserver applies to a Service.
//
// On update, values the server allocated or the client chose earlier
// (clusterIPs, node ports, ipFamilyPolicy) must be carried over from the
// stored object before this runs - as kube-apiserver's service registry
// does - or a request that omits them gets fresh defaults instead.
func Service(s *corev1.Service) {
	spec := &s.Spec

	setDefault(&spec.Type, corev1.ServiceTypeClusterIP)

	setDefault(&spec.SessionAffinity, corev1.ServiceAffinityNone)
	switch spec.SessionAffinity {
	case corev1.ServiceAffinityNone:
		// Upstream drops the config rather than rejecting it: it carries no
		// meaning without ClientIP affinity and old clients send it.
		spec.SessionAffinityConfig = nil
	case corev1.ServiceAffinityClientIP:
		if spec.SessionAffinityConfig == nil {
			spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{}
		}
		if spec.SessionAffinityConfig.ClientIP == nil {
			spec.SessionAffinityConfig.ClientIP = &corev1.ClientIPConfig{}
		}
		setDefaultPtr(&spec.SessionAffinityConfig.ClientIP.TimeoutSeconds, corev1.DefaultClientIPServiceAffinitySeconds)
	}

	for i := range spec.Ports {
		p := &spec.Ports[i]
		setDefault(&p.Protocol, corev1.ProtocolTCP)
		// An unset targetPort arrives either as int 0 or as "" depending on
		// the client; both mean "same as port".
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}

	if externallyAccessible(s) && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}

	if spec.InternalTrafficPolicy == nil && spec.Type != corev1.ServiceTypeExternalName {
		itp := corev1.ServiceInternalTrafficPolicyCluster
		spec.InternalTrafficPolicy = &itp
	}

	if spec.Type == corev1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		allocate := true
		spec.AllocateLoadBalancerNodePorts = &allocate
	}

	// Old clients only know the singular field; new ones must send both.
	// Mirror the singular into the plural so consumers can read clusterIPs
	// only. The reverse is deliberately not done (upstream rejects
	// clusterIPs without clusterIP, and so does package validation).
	if spec.ClusterIP != "" && len(spec.ClusterIPs) == 0 {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}

	if spec.IPFamilyPolicy == nil && spec.Type != corev1.ServiceTypeExternalName {
		// kube-apiserver decides this in its IP allocator, not in
		// SetDefaults_Service; these are the allocator's create-time rules.
		// The server's allocator may refine the result later (e.g. add the
		// second family for PreferDualStack on a dual-stack cluster, or
		// fill ipFamilies from the cluster's primary family); it must not
		// change an explicit user choice. Two families or two clusterIPs
		// with no policy end up SingleStack here and are then rejected by
		// validation, exactly like upstream.
		policy := corev1.IPFamilyPolicySingleStack
		if spec.ClusterIP == corev1.ClusterIPNone && len(spec.Selector) == 0 {
			// Headless services without a selector get their endpoints from
			// elsewhere and may carry either family.
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		spec.IPFamilyPolicy = &policy
	}

	if spec.Type == corev1.ServiceTypeLoadBalancer {
		for i := range s.Status.LoadBalancer.Ingress {
			ing := &s.Status.LoadBalancer.Ingress[i]
			if ing.IP != "" && ing.IPMode == nil {
				mode := corev1.LoadBalancerIPModeVIP
				ing.IPMode = &mode
			}
		}
	}
}

// Pod sets the defaults kube-apiserver applies to a Pod, including what the
// DefaultTolerationSeconds admission plugin adds.
func Pod(p *corev1.Pod) {
	podSpec(&p.Spec)
	defaultTolerations(&p.Spec)

	setDefault(&p.Status.Phase, corev1.PodPending)

	// Conversion in kube-apiserver keeps the singular and plural IP fields
	// paired; consumers read either. Only fill an empty side: a conflict is
	// left for validation to reject.
	if p.Status.PodIP != "" && len(p.Status.PodIPs) == 0 {
		p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
	}
	if p.Status.PodIP == "" && len(p.Status.PodIPs) > 0 {
		p.Status.PodIP = p.Status.PodIPs[0].IP
	}
	if p.Status.HostIP != "" && len(p.Status.HostIPs) == 0 {
		p.Status.HostIPs = []corev1.HostIP{{IP: p.Status.HostIP}}
	}
	if p.Status.HostIP == "" && len(p.Status.HostIPs) > 0 {
		p.Status.HostIP = p.Status.HostIPs[0].IP
	}
}

// podSpec is SetDefaults_PodSpec and the container defaults: what a pod
// and a pod template (in a DaemonSet) both get. Admission defaults (the
// tolerations) apply to pods only, as upstream.
func podSpec(spec *corev1.PodSpec) {
	setDefault(&spec.RestartPolicy, corev1.RestartPolicyAlways)
	setDefault(&spec.DNSPolicy, corev1.DNSClusterFirst)
	setDefault(&spec.SchedulerName, corev1.DefaultSchedulerName)
	setDefaultPtr(&spec.TerminationGracePeriodSeconds, int64(corev1.DefaultTerminationGracePeriodSeconds))
	setDefaultPtr(&spec.EnableServiceLinks, corev1.DefaultEnableServiceLinks)
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}

	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i], spec.HostNetwork)
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i], spec.HostNetwork)
	}
	for i := range spec.EphemeralContainers {
		// Same defaults as regular containers; the types are layout-identical
		// (upstream converts the same way).
		defaultContainer((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon), false)
	}
}

func defaultContainer(c *corev1.Container, hostNetwork bool) {
	setDefault(&c.ImagePullPolicy, defaultPullPolicy(c.Image))
	setDefault(&c.TerminationMessagePath, corev1.TerminationMessagePathDefault)
	setDefault(&c.TerminationMessagePolicy, corev1.TerminationMessageReadFile)

	for i := range c.Ports {
		port := &c.Ports[i]
		setDefault(&port.Protocol, corev1.ProtocolTCP)
		// With host networking the container port *is* the host port; upstream
		// records that so port-conflict checks and hostPort consumers see it.
		if hostNetwork && port.HostPort == 0 {
			port.HostPort = port.ContainerPort
		}
	}

	// Requests default to limits (SetDefaults_Pod).
	if c.Resources.Limits != nil {
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		for name, limit := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[name]; !ok {
				c.Resources.Requests[name] = limit.DeepCopy()
			}
		}
	}

	defaultProbe(c.LivenessProbe)
	defaultProbe(c.ReadinessProbe)
	defaultProbe(c.StartupProbe)
	if c.Lifecycle != nil {
		if c.Lifecycle.PostStart != nil {
			defaultHTTPGet(c.Lifecycle.PostStart.HTTPGet)
		}
		if c.Lifecycle.PreStop != nil {
			defaultHTTPGet(c.Lifecycle.PreStop.HTTPGet)
		}
	}
}

func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	setDefault(&p.TimeoutSeconds, defaultProbeTimeoutSeconds)
	setDefault(&p.PeriodSeconds, defaultProbePeriodSeconds)
	setDefault(&p.SuccessThreshold, defaultProbeSuccessThreshold)
	setDefault(&p.FailureThreshold, defaultProbeFailureThreshold)
	defaultHTTPGet(p.HTTPGet)
}

func defaultHTTPGet(h *corev1.HTTPGetAction) {
	if h == nil {
		return
	}
	setDefault(&h.Path, "/")
	setDefault(&h.Scheme, corev1.URISchemeHTTP)
}

// defaultPullPolicy follows SetDefaults_Container: Always for ":latest" and
// for references with neither tag nor digest (which mean ":latest"),
// IfNotPresent otherwise. An empty image, which upstream fails to parse, gets
// IfNotPresent like upstream; validation rejects it anyway.
func defaultPullPolicy(image string) corev1.PullPolicy {
	if image == "" {
		return corev1.PullIfNotPresent
	}
	ref, digest := image, ""
	if i := strings.Index(ref, "@"); i >= 0 {
		ref, digest = ref[:i], ref[i+1:]
	}
	tag := ""
	// A ':' before the last '/' belongs to a registry host:port, not a tag.
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		tag = ref[i+1:]
	}
	if tag == "latest" || (tag == "" && digest == "") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// defaultTolerations does what the DefaultTolerationSeconds admission plugin
// does: unless the pod already tolerates them, tolerate the not-ready and
// unreachable NoExecute taints for 300s, so a brief node hiccup does not
// evict every pod at once.
func defaultTolerations(spec *corev1.PodSpec) {
	toleratesNotReady, toleratesUnreachable := false, false
	for _, t := range spec.Tolerations {
		effectMatches := t.Effect == corev1.TaintEffectNoExecute || t.Effect == ""
		if !effectMatches {
			continue
		}
		if t.Key == corev1.TaintNodeNotReady || t.Key == "" {
			toleratesNotReady = true
		}
		if t.Key == corev1.TaintNodeUnreachable || t.Key == "" {
			toleratesUnreachable = true
		}
	}
	for _, taint := range []struct {
		key       string
		tolerated bool
	}{
		{corev1.TaintNodeNotReady, toleratesNotReady},
		{corev1.TaintNodeUnreachable, toleratesUnreachable},
	} {
		if !taint.tolerated {
			seconds := defaultTolerationSeconds
			spec.Tolerations = append(spec.Tolerations, corev1.Toleration{
				Key:               taint.key,
				Operator:          corev1.TolerationOpExists,
				Effect:            corev1.TaintEffectNoExecute,
				TolerationSeconds: &seconds,
			})
		}
	}
}

// Node sets the defaults kube-apiserver applies to a Node: allocatable
// defaults to capacity, and the podCIDR/podCIDRs pair is kept in step the way
// conversion does (an empty side is filled; a conflict is left to validation).
func Node(n *corev1.Node) {
	if n.Status.Allocatable == nil && n.Status.Capacity != nil {
		n.Status.Allocatable = make(corev1.ResourceList, len(n.Status.Capacity))
		for name, q := range n.Status.Capacity {
			n.Status.Allocatable[name] = q.DeepCopy()
		}
	}
	if n.Spec.PodCIDR != "" && len(n.Spec.PodCIDRs) == 0 {
		n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
	}
	if n.Spec.PodCIDR == "" && len(n.Spec.PodCIDRs) > 0 {
		n.Spec.PodCIDR = n.Spec.PodCIDRs[0]
	}
}

// EndpointSlice sets the defaults kube-apiserver applies to an EndpointSlice:
// each port gets an empty name and protocol TCP when they are nil. Endpoint
// conditions are deliberately left nil: for them nil means "unknown", which
// consumers interpret differently from false.
func EndpointSlice(s *discoveryv1.EndpointSlice) {
	for i := range s.Ports {
		p := &s.Ports[i]
		setDefaultPtr(&p.Name, "")
		setDefaultPtr(&p.Protocol, corev1.ProtocolTCP)
	}
}

// Namespace sets the defaults kube-apiserver applies to a Namespace: the
// kubernetes.io/metadata.name label (so namespace selectors can pick a
// namespace by name), status.phase Active, and the "kubernetes" finalizer
// that makes namespace deletion wait for the namespace's content to be
// removed.
//
// The finalizer is not added to a namespace that is being deleted: by then
// the namespace controller removes it on purpose, and re-adding it would
// block deletion forever.
func Namespace(ns *corev1.Namespace) {
	if ns.Name != "" {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}
	setDefault(&ns.Status.Phase, corev1.NamespaceActive)
	if ns.DeletionTimestamp == nil {
		has := false
		for _, f := range ns.Spec.Finalizers {
			if f == corev1.FinalizerKubernetes {
				has = true
				break
			}
		}
		if !has {
			ns.Spec.Finalizers = append(ns.Spec.Finalizers, corev1.FinalizerKubernetes)
		}
	}
}

// ConfigMap sets the one default kube-apiserver applies to a ConfigMap: a
// non-nil data map. It does not change the serialized form (an empty map is
// omitted), but readers of the typed object can index it without a nil check.
func ConfigMap(c *corev1.ConfigMap) {
	if c.Data == nil {
		c.Data = map[string]string{}
	}
}

// externallyAccessible matches k8s.io/kubernetes/pkg/api/service: services
// reachable from outside the cluster network, for which
// externalTrafficPolicy applies.
func externallyAccessible(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer ||
		s.Spec.Type == corev1.ServiceTypeNodePort ||
		(s.Spec.Type == corev1.ServiceTypeClusterIP && len(s.Spec.ExternalIPs) > 0)
}

// setDefault sets *field to def when it holds its type's zero value, which
// for these API fields means the client left it unset.
func setDefault[T comparable](field *T, def T) {
	var unset T
	if *field == unset {
		*field = def
	}
}

// setDefaultPtr points an unset (nil) optional field at a copy of def.
func setDefaultPtr[T any](field **T, def T) {
	if *field == nil {
		*field = &def
	}
}
