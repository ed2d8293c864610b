package manifest

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodenet/nodenet/flanneld"
	"github.com/nodenet/nodenet/proxy"
)

const checkedIn = "../nodenet.yaml"

// TestCheckedInIsDefault holds daemonset/nodenet.yaml to what `nodenet
// manifest` renders with no flags.
func TestCheckedInIsDefault(t *testing.T) {
	want, err := Render(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(checkedIn)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("daemonset/nodenet.yaml is not the default rendering; regenerate it: go run ./cmd/nodenet manifest > daemonset/nodenet.yaml")
	}
}

// decoded is the manifest read back strictly, one typed object per kind.
type decoded struct {
	ns   corev1.Namespace
	sa   corev1.ServiceAccount
	role rbacv1.ClusterRole
	crb  rbacv1.ClusterRoleBinding
	cm   corev1.ConfigMap
	ds   appsv1.DaemonSet
}

// decodeStrict splits the YAML (of kinds distinct kinds) into documents and decodes each into the
// k8s.io/api type its kind names, refusing unknown or duplicate fields, so
// a misspelt field fails here and not on a user's cluster.
func decodeStrict(t *testing.T, y []byte, kinds int) decoded {
	t.Helper()
	var d decoded
	seen := map[string]bool{}
	for i, doc := range strings.Split(string(y), "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var into any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Namespace":
			into = &d.ns
		case "v1 ServiceAccount":
			into = &d.sa
		case "rbac.authorization.k8s.io/v1 ClusterRole":
			into = &d.role
		case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
			into = &d.crb
		case "v1 ConfigMap":
			into = &d.cm
		case "apps/v1 DaemonSet":
			into = &d.ds
		default:
			t.Fatalf("document %d: unexpected %s %s", i, tm.APIVersion, tm.Kind)
		}
		if seen[tm.Kind] {
			t.Fatalf("two %s objects", tm.Kind)
		}
		seen[tm.Kind] = true
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s: %v", tm.Kind, err)
		}
	}
	if len(seen) != kinds {
		t.Fatalf("kinds %v, want %d", seen, kinds)
	}
	return d
}

func TestStrictDecodeCatchesTypos(t *testing.T) {
	y, err := Render(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	decodeStrict(t, y, 6) // the real one decodes
	bad := bytes.Replace(y, []byte("hostNetwork: true"), []byte("hostNetwrok: true"), 1)
	var ds appsv1.DaemonSet
	docs := strings.Split(string(bad), "\n---\n")
	if err := yaml.UnmarshalStrict([]byte(docs[len(docs)-1]), &ds); err == nil || !strings.Contains(err.Error(), "hostNetwrok") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}

// TestDaemonSetShape checks what a node daemon DaemonSet must have, as
// kube-flannel.yml and kube-proxy do.
func TestDaemonSetShape(t *testing.T) {
	o := Defaults()
	o.ProxyMode = "nftables"
	o.Backend = flanneld.BackendHostGW
	o.ClusterCIDRs = append(o.ClusterCIDRs, netip.MustParsePrefix("fd00:10:244::/56"))
	o.NodePortAddresses = proxy.NodePortAddresses{Primary: true}
	y, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	d := decodeStrict(t, y, 6)
	if d.ns.Name != o.Namespace || d.sa.Namespace != o.Namespace || d.cm.Namespace != o.Namespace || d.ds.Namespace != o.Namespace {
		t.Error("objects outside the namespace")
	}
	if d.crb.RoleRef.Name != d.role.Name || d.crb.Subjects[0].Name != d.sa.Name || d.crb.Subjects[0].Namespace != o.Namespace {
		t.Errorf("binding %+v does not bind the role to the service account", d.crb)
	}
	nc, err := flanneld.ParseConfig([]byte(d.cm.Data[KeyNetConf]))
	if err != nil {
		t.Fatal(err)
	}
	if nc.Backend.Type != "host-gw" || nc.Network.String() != "10.244.0.0/16" || !nc.EnableIPv6 || nc.IPv6Network.String() != "fd00:10:244::/56" {
		t.Errorf("net-conf.json: %+v", nc)
	}
	if d.cm.Data[KeyProxyMode] != "nftables" || d.cm.Data[KeyClusterCIDR] != "10.244.0.0/16,fd00:10:244::/56" || d.cm.Data[KeyNodePortAddresses] != "primary" {
		t.Errorf("ConfigMap data: %v", d.cm.Data)
	}
	spec := d.ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" || spec.ServiceAccountName != d.sa.Name {
		t.Errorf("pod spec: hostNetwork %v priority %q sa %q", spec.HostNetwork, spec.PriorityClassName, spec.ServiceAccountName)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v: want to tolerate everything", spec.Tolerations)
	}
	if d.ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || d.ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("update strategy %+v", d.ds.Spec.UpdateStrategy)
	}
	if len(spec.InitContainers) != 1 || !strings.Contains(strings.Join(spec.InitContainers[0].Command, " "), "install-cni") {
		t.Errorf("init containers %+v", spec.InitContainers)
	}
	volumes := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			volumes[v.Name] = v.HostPath.Path
		}
	}
	for _, p := range []string{"/run/flannel", "/etc/cni/net.d", "/opt/cni/bin", "/run/xtables.lock", "/lib/modules", "/sys/fs/bpf"} {
		found := false
		for _, vp := range volumes {
			found = found || vp == p
		}
		if !found {
			t.Errorf("no hostPath volume for %s", p)
		}
	}
	ports := map[string]int{"flanneld": FlanneldHealthPort, "proxy": ProxyHealthPort}
	for _, c := range spec.Containers {
		if c.Image != o.Image || c.LivenessProbe == nil || c.ReadinessProbe == nil || c.Resources.Requests.Cpu().IsZero() {
			t.Errorf("%s: image %q probes %v/%v requests %v", c.Name, c.Image, c.LivenessProbe, c.ReadinessProbe, c.Resources.Requests)
			continue
		}
		if got := c.LivenessProbe.HTTPGet.Port.IntValue(); got != ports[c.Name] {
			t.Errorf("%s: liveness probe on port %d, want %d", c.Name, got, ports[c.Name])
		}
		if !strings.Contains(strings.Join(c.Command, " "), fmt.Sprint(ports[c.Name])) {
			t.Errorf("%s: command %q does not listen on the probed port %d", c.Name, c.Command, ports[c.Name])
		}
		nodeName := false
		for _, e := range c.Env {
			nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
		}
		if !nodeName {
			t.Errorf("%s: no NODE_NAME from the downward API", c.Name)
		}
		// Every $(VAR) in the command must be in the env, or the kubelet
		// passes it through unexpanded.
		for _, arg := range c.Command {
			for rest := arg; strings.Contains(rest, "$("); {
				start := strings.Index(rest, "$(")
				end := strings.Index(rest[start:], ")")
				name := rest[start+2 : start+end]
				if !hasEnv(c.Env, name) {
					t.Errorf("%s: %q refers to $(%s), which is not in its env", c.Name, arg, name)
				}
				rest = rest[start+end:]
			}
		}
	}
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// TestEveryBackend: each backend flanneld knows, alloc included, renders
// into the ConfigMap's net-conf.json as upstream writes it.
func TestEveryBackend(t *testing.T) {
	for _, b := range flanneld.Backends {
		o := Defaults()
		o.Backend = b
		y, err := Render(o)
		if err != nil {
			t.Fatalf("backend %s: %v", b, err)
		}
		nc, err := flanneld.ParseConfig([]byte(decodeStrict(t, y, 6).cm.Data[KeyNetConf]))
		if err != nil || nc.Backend.Type != b {
			t.Errorf("backend %s: net-conf.json %+v (%v)", b, nc, err)
		}
	}
}

// TestHostRouting: the option reaches flanneld's command line; the default
// is flannel's own forwarding.
func TestHostRouting(t *testing.T) {
	for _, tc := range []struct{ opt, want string }{{"", "kernel"}, {"kernel", "kernel"}, {"ebpf", "ebpf"}} {
		o := Defaults()
		o.HostRouting = tc.opt
		y, err := Render(o)
		if err != nil {
			t.Fatal(err)
		}
		ds := decodeStrict(t, y, 6).ds
		var cmd []string
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == FlanneldContainer {
				cmd = c.Command
			}
		}
		if !slices.Contains(cmd, "--host-routing="+tc.want) {
			t.Errorf("HostRouting %q: flanneld runs %q, want --host-routing=%s", tc.opt, cmd, tc.want)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Options)
		want   string
	}{
		{func(o *Options) { o.ProxyMode = "userspace" }, `proxy mode "userspace"`},
		{func(o *Options) { o.Backend = "udp" }, `backend "udp"`},
		{func(o *Options) { o.Namespace = "Bad_NS" }, `namespace "Bad_NS"`},
		{func(o *Options) { o.Image = "" }, "image"},
		{func(o *Options) {
			o.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("10.1.0.0/16")}
		}, "one IPv4 and/or one IPv6"},
		{func(o *Options) { o.ClusterCIDRs = nil }, "cluster CIDRs"},
		{func(o *Options) { o.APIServer = "10.0.0.1" }, `API server "10.0.0.1": want host:port`},
		{func(o *Options) { o.APIServer = "10.0.0.1:0" }, `port "0"`},
		{func(o *Options) { o.HostRouting = "xdp" }, `host routing "xdp"`},
		{func(o *Options) { o.NodeSelector = map[string]string{"bad key": "x"} }, `node selector key "bad key"`},
		{func(o *Options) { o.NodeSelector = map[string]string{"plane": "a b"} }, `node selector plane="a b"`},
	} {
		o := Defaults()
		tc.mutate(&o)
		if _, err := Render(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", o, err, tc.want)
		}
	}
}

// TestAPIServerEnv: with APIServer set, flanneld and the proxy get
// KUBERNETES_SERVICE_HOST/PORT (the init container needs no API).
func TestAPIServerEnv(t *testing.T) {
	o := Defaults()
	o.APIServer = "172.18.0.2:6443"
	y, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	ds := decodeStrict(t, y, 6).ds
	for _, c := range ds.Spec.Template.Spec.Containers {
		got := map[string]string{}
		for _, e := range c.Env {
			got[e.Name] = e.Value
		}
		if got["KUBERNETES_SERVICE_HOST"] != "172.18.0.2" || got["KUBERNETES_SERVICE_PORT"] != "6443" {
			t.Errorf("container %s env: %v", c.Name, got)
		}
	}
	def := decodeStrict(t, must(Render(Defaults())), 6).ds
	for _, c := range def.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if strings.HasPrefix(e.Name, "KUBERNETES_SERVICE_") {
				t.Errorf("default manifest sets %s on %s", e.Name, c.Name)
			}
		}
	}
}

// TestNodeSelector: the DaemonSet and its cleanup counterpart run on the
// selected nodes only; without a selector, on every node.
func TestNodeSelector(t *testing.T) {
	o := Defaults()
	o.NodeSelector = map[string]string{"example.com/plane": "nodenet"}
	ds := decodeStrict(t, must(Render(o)), 6).ds
	if got := ds.Spec.Template.Spec.NodeSelector; !maps.Equal(got, o.NodeSelector) {
		t.Errorf("DaemonSet nodeSelector %v, want %v", got, o.NodeSelector)
	}
	cleanup := must(RenderCleanup(o))
	if !strings.Contains(string(cleanup), "nodeSelector:\n        example.com/plane: nodenet\n") {
		t.Errorf("cleanup manifest lacks the node selector:\n%s", cleanup)
	}
	if def := decodeStrict(t, must(Render(Defaults())), 6).ds; def.Spec.Template.Spec.NodeSelector != nil {
		t.Errorf("default manifest selects nodes: %v", def.Spec.Template.Spec.NodeSelector)
	}
}
