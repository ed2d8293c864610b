package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/nodenet/nodenet/daemonset"
	"github.com/nodenet/nodenet/flanneld"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/app"
)

// Options are what a user chooses when rendering the manifest.
type Options struct {
	Namespace string
	Image     string
	// ProxyMode is the proxy's data plane (iptables, nftables, ipvs,
	// ebpf); it lands in the ConfigMap, so switching is an edit there
	// and a rollout restart.
	ProxyMode string
	// Backend is flanneld's backend type (one of flanneld.Backends).
	Backend string
	// HostRouting is flanneld's --host-routing (kernel or ebpf; "" is
	// kernel, flannel's own forwarding).
	HostRouting string
	// ClusterCIDRs are the pod networks, at most one per family: flannel's
	// Network and IPv6Network, and the proxy's --cluster-cidr.
	ClusterCIDRs []netip.Prefix
	// NodePortAddresses limit NodePorts to local addresses in these
	// CIDRs ("primary" for the node's own IPs); empty is all.
	NodePortAddresses proxy.NodePortAddresses
	// APIServer (host:port), when set, is where the daemons reach the API
	// server (KUBERNETES_SERVICE_HOST/PORT in their env). In-cluster
	// clients otherwise dial the kubernetes Service's ClusterIP, which
	// only a running proxy translates: on a cluster where nodenet's proxy
	// replaces kube-proxy, the proxy cannot depend on itself to start.
	APIServer string
	// NodeSelector, when set, confines the DaemonSet (and the cleanup
	// DaemonSet) to the nodes with these labels: nodenet on some nodes of
	// a cluster while others keep another CNI and proxy, as when a
	// cluster moves to nodenet node by node.
	NodeSelector map[string]string
}

// Defaults are the checked-in daemonset/nodenet.yaml's options.
func Defaults() Options {
	return Options{
		Namespace:    "nodenet-system",
		Image:        daemonset.DefaultImage,
		ProxyMode:    "iptables",
		Backend:      flanneld.BackendVXLAN,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
	}
}

// Names of the objects and files the DaemonSet's pods use.
const (
	// BPFPinDir is the ebpf proxy's --bpf-pin-dir, on the host's bpffs.
	BPFPinDir = "/sys/fs/bpf/nodenet"
	// CgroupPath is where the proxy container sees the host's
	// /sys/fs/cgroup (its --cgroup-path); on a hybrid host the proxy uses
	// the cgroup v2 hierarchy under it (unified/).
	CgroupPath    = "/run/nodenet/host-cgroup"
	Name          = "nodenet"
	ConfigMapName = "nodenet-config"
	// Containers of the DaemonSet's pods.
	FlanneldContainer = "flanneld"
	ProxyContainer    = "proxy"
	// Ports the daemons' health endpoints listen on (host network).
	FlanneldHealthPort = 8471
	ProxyHealthPort    = 10256
	netConfDir         = "/etc/kube-flannel"
	// Host paths the pods write; `nodenet cleanup` defaults to them.
	NetConfPath = netConfDir + "/" + KeyNetConf
	CNIConfPath = "/etc/cni/net.d/10-nodenet.conflist"
	CNIBinDir   = "/opt/cni/bin"
)

// ConfigMap keys.
const (
	KeyNetConf           = "net-conf.json"
	KeyCNIConf           = "cni-conf.json"
	KeyProxyMode         = "proxyMode"
	KeyClusterCIDR       = "clusterCIDR"
	KeyNodePortAddresses = "nodePortAddresses"
)

func (o Options) hostRouting() string {
	if o.HostRouting == "" {
		return flanneld.HostRoutingKernel
	}
	return o.HostRouting
}

// Validate checks every option, naming the one that is wrong.
func (o Options) Validate() error {
	if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", o.Namespace, strings.Join(errs, "; "))
	}
	if strings.TrimSpace(o.Image) == "" || strings.ContainsAny(o.Image, " \t\n") {
		return fmt.Errorf("image %q: want name:tag", o.Image)
	}
	if o.APIServer != "" {
		host, port, err := net.SplitHostPort(o.APIServer)
		if err != nil || host == "" {
			return fmt.Errorf("API server %q: want host:port (the API server's address on the node network): %v", o.APIServer, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("API server %q: port %q is not 1-65535", o.APIServer, port)
		}
	}
	if !slices.Contains(app.KnownModes, o.ProxyMode) {
		return fmt.Errorf("proxy mode %q: want one of %v", o.ProxyMode, app.KnownModes)
	}
	for _, k := range slices.Sorted(maps.Keys(o.NodeSelector)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("node selector key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(o.NodeSelector[k]); len(errs) > 0 {
			return fmt.Errorf("node selector %s=%q: %s", k, o.NodeSelector[k], strings.Join(errs, "; "))
		}
	}
	switch o.HostRouting {
	case "", flanneld.HostRoutingKernel, flanneld.HostRoutingEBPF:
	default:
		return fmt.Errorf("host routing %q: want %s or %s", o.HostRouting, flanneld.HostRoutingKernel, flanneld.HostRoutingEBPF)
	}
	if _, err := flanneld.ParseConfig(o.netConf()); err != nil {
		return fmt.Errorf("backend %q, cluster CIDRs %v: %w", o.Backend, o.ClusterCIDRs, err)
	}
	var v4, v6 int
	for _, p := range o.ClusterCIDRs {
		if p.Addr().Is4() {
			v4++
		} else {
			v6++
		}
	}
	if v4 > 1 || v6 > 1 || v4+v6 == 0 {
		return fmt.Errorf("cluster CIDRs %v: want one IPv4 and/or one IPv6 prefix", o.ClusterCIDRs)
	}
	return nil
}

// netConf is net-conf.json in flannel's keys.
func (o Options) netConf() []byte {
	nc := map[string]any{"Backend": map[string]any{"Type": o.Backend}}
	ipv4 := false
	for _, p := range o.ClusterCIDRs {
		if p.Addr().Is4() {
			nc["Network"], ipv4 = p.String(), true
		} else {
			nc["IPv6Network"], nc["EnableIPv6"] = p.String(), true
		}
	}
	if !ipv4 {
		nc["EnableIPv4"] = false
	}
	b, _ := json.MarshalIndent(nc, "", "  ")
	return append(b, '\n')
}

// Render returns the manifest: every object as YAML, separated by "---".
func Render(o Options) ([]byte, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return render(header, Objects(o))
}

// render writes objs as YAML documents after header.
func render(header string, objs []runtime.Object) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(header)
	for i, obj := range objs {
		b, err := marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("render %T: %w", obj, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// marshal is YAML without what the typed structs always carry but a
// manifest never says: null fields (creationTimestamp), status, an empty
// spec.
func marshal(obj runtime.Object) ([]byte, error) {
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if spec, ok := m["spec"].(map[string]any); ok && len(spec) == 0 {
		delete(m, "spec")
	}
	return yaml.Marshal(dropNulls(m))
}

func dropNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			t[k] = dropNulls(e)
		}
	case []any:
		for i, e := range t {
			t[i] = dropNulls(e)
		}
	}
	return v
}

const header = `# nodenet: flanneld + proxy + CNI plugin as one privileged DaemonSet.
# Rendered by ` + "`nodenet manifest`" + ` (daemonset/manifest); edit that, not this file.
# kubectl apply -f daemonset/nodenet.yaml
# Switch the proxy mode: edit proxyMode in ConfigMap nodenet-config, then
#   kubectl -n nodenet-system rollout restart daemonset/nodenet
`

// Objects are the manifest's objects in apply order.
func Objects(o Options) []runtime.Object {
	var cidrs []string
	for _, p := range o.ClusterCIDRs {
		cidrs = append(cidrs, p.String())
	}
	labels := map[string]string{"app.kubernetes.io/name": Name}
	return []runtime.Object{
		namespace(o),
		&corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: o.Namespace, Labels: labels}},
		&rbacv1.ClusterRole{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: labels}, Rules: Rules()},
		&rbacv1.ClusterRoleBinding{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: Name, Labels: labels},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: Name, Namespace: o.Namespace}}},
		&corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: o.Namespace, Labels: labels},
			Data: map[string]string{
				KeyNetConf:           string(o.netConf()),
				KeyCNIConf:           flanneld.DefaultCNIConfTemplate,
				KeyProxyMode:         o.ProxyMode,
				KeyClusterCIDR:       strings.Join(cidrs, ","),
				KeyNodePortAddresses: o.NodePortAddresses.String(),
			}},
		daemonSet(o, labels),
	}
}

func namespace(o Options) *corev1.Namespace {
	return &corev1.Namespace{TypeMeta: typeMeta("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: o.Namespace, Labels: map[string]string{
		// The daemons run privileged: the namespace must admit them.
		"pod-security.kubernetes.io/enforce": "privileged",
	}}}
}

func hostPath(name, path string, t corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
}

func mount(name, path string, ro bool) corev1.VolumeMount {
	return corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: ro}
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// Rules are the least privilege the daemons need, each rule with the code
// that needs it. TestManifestRBAC (cmd/nodenet) holds them to the requests
// the daemons really make, under an API server that enforces them.
func Rules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		// flanneld (kube subnet manager) watches nodes for their podCIDRs
		// and peers' annotations; the proxy watches nodes for topology
		// and its own node's addresses.
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
		// flanneld publishes its backend annotations and clears
		// NetworkUnavailable on its own node.
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		// The proxy's Service and EndpointSlice informers.
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}
}

func daemonSet(o Options, labels map[string]string) *appsv1.DaemonSet {
	privileged := true
	maxUnavailable := intstr.FromInt32(1)
	env := []corev1.EnvVar{
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	if o.APIServer != "" {
		host, port, _ := net.SplitHostPort(o.APIServer)
		env = append(env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host}, corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: port})
	}
	fromConfig := func(name, key string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName}, Key: key}}}
	}
	requests := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
	}
	probe := func(path string, port int) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port)), Host: "127.0.0.1"}},
			PeriodSeconds: 10, FailureThreshold: 3, TimeoutSeconds: 2}
	}
	// Privileged, not a capability list: besides NET_ADMIN and NET_RAW
	// (routes, links, iptables/nft) and BPF + SYS_ADMIN (the ebpf mode's
	// programs and bpffs pins), the daemons write /proc/sys/net
	// (forwarding, rp_filter, conntrack tunables), which the runtime
	// mounts read-only in any container that is not privileged.
	sc := &corev1.SecurityContext{Privileged: &privileged}
	return &appsv1.DaemonSet{
		TypeMeta:   typeMeta("apps/v1", "DaemonSet"),
		ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: o.Namespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:        true,
					DNSPolicy:          corev1.DNSClusterFirstWithHostNet,
					PriorityClassName:  "system-node-critical",
					ServiceAccountName: Name,
					NodeSelector:       o.NodeSelector,
					Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					InitContainers: []corev1.Container{{
						Name: "install-cni", Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{daemonset.NodenetPath, "install-cni", "--source", daemonset.NodenetCNIPath, "--cni-bin-dir", CNIBinDir, "--names", "nodenet,flannel"},
						VolumeMounts:    []corev1.VolumeMount{mount("cni-bin", CNIBinDir, false)},
						Resources:       requests("10m", "16Mi"),
						SecurityContext: sc,
					}},
					Containers: []corev1.Container{
						{
							Name: FlanneldContainer, Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
							Command: []string{daemonset.NodenetPath, "flanneld", "--kube-subnet-mgr", "--ip-masq",
								"--net-config-path", netConfDir + "/" + KeyNetConf,
								"--cni-conf-template", netConfDir + "/" + KeyCNIConf,
								"--install-cni-conf", CNIConfPath,
								"--healthz-ip", "127.0.0.1", fmt.Sprintf("--healthz-port=%d", FlanneldHealthPort),
								"--host-routing=" + o.hostRouting()},
							Env:             env,
							Resources:       requests("100m", "50Mi"),
							LivenessProbe:   probe("/healthz", FlanneldHealthPort),
							ReadinessProbe:  probe("/readyz", FlanneldHealthPort),
							SecurityContext: sc,
							VolumeMounts: []corev1.VolumeMount{mount("run-flannel", "/run/flannel", false), mount("cni-conf", "/etc/cni/net.d", false),
								mount("config", netConfDir, true), mount("xtables-lock", "/run/xtables.lock", false), mount("modules", "/lib/modules", true)},
						},
						{
							Name: ProxyContainer, Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
							// $(VAR) is expanded by the kubelet from the
							// ConfigMap-backed env below.
							Command: []string{daemonset.NodenetProxyPath, "--proxy-mode=$(PROXY_MODE)", "--hostname-override=$(NODE_NAME)",
								"--cluster-cidr=$(CLUSTER_CIDR)", "--nodeport-addresses=$(NODEPORT_ADDRESSES)",
								fmt.Sprintf("--healthz-bind-address=0.0.0.0:%d", ProxyHealthPort),
								// The ebpf mode's pins and the cgroup whose
								// sockets it translates: the host's, through
								// the hostPath mounts below (a container's own
								// /sys/fs/cgroup is its cgroup namespace's).
								"--bpf-pin-dir=" + BPFPinDir, "--cgroup-path=" + CgroupPath,
								// Its tc path on whichever interfaces hold
								// the node's addresses: one manifest for
								// nodes whose NICs are named differently.
								"--bpf-tc-interfaces=auto"},
							Env: append(append([]corev1.EnvVar(nil), env...), fromConfig("PROXY_MODE", KeyProxyMode),
								fromConfig("CLUSTER_CIDR", KeyClusterCIDR), fromConfig("NODEPORT_ADDRESSES", KeyNodePortAddresses)),
							Resources:       requests("100m", "50Mi"),
							LivenessProbe:   probe("/livez", ProxyHealthPort),
							ReadinessProbe:  probe("/healthz", ProxyHealthPort),
							SecurityContext: sc,
							VolumeMounts: []corev1.VolumeMount{mount("xtables-lock", "/run/xtables.lock", false), mount("modules", "/lib/modules", true),
								mount("bpffs", "/sys/fs/bpf", false), mount("cgroup", CgroupPath, false)},
						},
					},
					Volumes: []corev1.Volume{
						hostPath("run-flannel", "/run/flannel", corev1.HostPathDirectoryOrCreate),
						hostPath("cni-conf", "/etc/cni/net.d", corev1.HostPathDirectoryOrCreate),
						hostPath("cni-bin", CNIBinDir, corev1.HostPathDirectoryOrCreate),
						hostPath("xtables-lock", "/run/xtables.lock", corev1.HostPathFileOrCreate),
						hostPath("modules", "/lib/modules", corev1.HostPathDirectoryOrCreate),
						hostPath("bpffs", "/sys/fs/bpf", corev1.HostPathDirectoryOrCreate),
						hostPath("cgroup", "/sys/fs/cgroup", corev1.HostPathDirectoryOrCreate),
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName},
							Items:                []corev1.KeyToPath{{Key: KeyNetConf, Path: KeyNetConf}, {Key: KeyCNIConf, Path: KeyCNIConf}}}}},
					},
				},
			},
		},
	}
}
