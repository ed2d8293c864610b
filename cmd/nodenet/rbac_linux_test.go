package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/daemonset"
	"github.com/nodenet/nodenet/daemonset/manifest"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/internal/testbin"
)

// rbacEnforcer is the manifest's ClusterRole as an authorizer for the
// requests of the node daemons (told by their User-Agent); everyone else
// (the test itself) may do everything. It keeps what it saw.
type rbacEnforcer struct {
	rules []rbacv1.PolicyRule
	mu    sync.Mutex
	seen  map[string]bool // "verb group/resource[/sub]" allowed
	// denied are the requests the rules did not cover.
	denied []string
}

func (e *rbacEnforcer) Authorize(a apiserver.Attributes) (bool, string) {
	daemon := strings.HasPrefix(a.UserAgent, "nodenet-flanneld/") || strings.HasPrefix(a.UserAgent, "nodenet-proxy/")
	if !daemon {
		return true, ""
	}
	res := a.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	key := fmt.Sprintf("%s %s/%s", a.Verb, a.Group, res)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.rules {
		if slices.Contains(r.APIGroups, a.Group) && slices.Contains(r.Resources, res) && slices.Contains(r.Verbs, a.Verb) {
			e.seen[key] = true
			return true, ""
		}
	}
	e.denied = append(e.denied, strings.SplitN(a.UserAgent, "/", 2)[0]+": "+key)
	return false, "not in daemonset/nodenet.yaml's ClusterRole"
}

// TestManifestRBAC runs flanneld and the proxy with the DaemonSet's own
// command lines (from the rendered manifest, $(VAR)s expanded from its
// ConfigMap) against an API server that enforces the manifest's
// ClusterRole on them: every request they make must be allowed (the role
// is enough) and every verb the role grants must be used (the role is no
// more than enough), except the ones listed with the reason they are not
// exercised here.
func TestManifestRBAC(t *testing.T) {
	nettest.SkipShort(t, "starts flanneld and the proxy in a namespace")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "iptables-restore")
	nettest.RequireTool(t, "nft")
	binDir := testbin.Build(t)
	// The image's binaries, as the agent maps them.
	bins := map[string]string{daemonset.NodenetPath: filepath.Join(binDir, "nodenet"),
		daemonset.NodenetProxyPath: filepath.Join(binDir, "nodenet-proxy")}
	enf := &rbacEnforcer{rules: manifest.Rules(), seen: map[string]bool{}}
	api := testapi.Start(t, func(c *apiserver.Config) { c.Authorizer = enf })

	o := manifest.Defaults()
	var cm *corev1.ConfigMap
	var pod corev1.PodSpec
	for _, obj := range manifest.Objects(o) {
		switch v := obj.(type) {
		case *corev1.ConfigMap:
			cm = v
		case *appsv1.DaemonSet:
			pod = v.Spec.Template.Spec
		}
	}
	if cm == nil || len(pod.Containers) == 0 {
		t.Fatal("the manifest has no ConfigMap or DaemonSet")
	}

	// The node: a namespace with an uplink and default route (flanneld
	// picks its interface from it), registered with its podCIDR as node
	// IPAM would.
	const node, nodeIP = "n1", "192.168.77.2"
	ns, peer := nettest.New(t), nettest.New(t)
	nettest.Link(t, ns, "eth0", nodeIP+"/24", peer, "eth0", "192.168.77.1/24")
	ns.MustExec(t, "ip", "route", "add", "default", "via", "192.168.77.1")
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}}}
	if _, err := api.Client.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(api.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	nettest.ForwardLoopback(t, ns, u.Host)

	// The ConfigMap's files where the container would mount them, host
	// paths moved into the test's directory.
	dir := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"NODE_NAME": node, "POD_NAME": "nodenet-abcde", "POD_NAMESPACE": o.Namespace}
	for _, c := range pod.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				env[e.Name] = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
			}
		}
	}
	procs := map[string]*nettest.Process{}
	for _, c := range pod.Containers {
		bin, ok := bins[c.Command[0]]
		if !ok {
			t.Fatalf("%s runs %s, not one of the image's binaries", c.Name, c.Command[0])
		}
		var args []string
		for _, a := range c.Command[1:] {
			for k, v := range env {
				a = strings.ReplaceAll(a, "$("+k+")", v)
			}
			a = strings.ReplaceAll(a, "/etc/kube-flannel", dir)
			a = strings.ReplaceAll(a, "/etc/cni/net.d", dir)
			args = append(args, a)
		}
		// The one thing a pod gets elsewhere: its API credentials (the
		// in-cluster config), here a kubeconfig; and subnet.env stays out
		// of the host's /run/flannel.
		args = append(args, "--kubeconfig="+api.KubeconfigPath())
		if c.Name == "flanneld" {
			args = append(args, "--subnet-file="+filepath.Join(dir, "subnet.env"))
		}
		var envList []string
		for k, v := range env {
			envList = append(envList, k+"="+v)
		}
		procs[c.Name] = nettest.StartProcess(t, ns, envList, bin, args...)
	}

	// What the daemons do for a Service: flanneld annotates its node and
	// writes the conflist, the proxy programs the Service.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	svc, err = api.Client.CoreV1().Services("default").Create(t.Context(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port, proto, ready := "http", corev1.ProtocolTCP, true
	pn := int32(8080)
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &port, Protocol: &proto, Port: &pn}}}
	if _, err := api.Client.DiscoveryV1().EndpointSlices("default").Create(t.Context(), slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := func() bool {
		out, _ := ns.Exec(t.Context(), "iptables-save", "-t", "nat")
		if !strings.Contains(string(out), svc.Spec.ClusterIP) {
			return false
		}
		if _, err := os.Stat(filepath.Join(dir, "10-nodenet.conflist")); err != nil {
			return false
		}
		got, err := api.Client.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		return err == nil && got.Annotations["flannel.alpha.coreos.com/backend-data"] != ""
	}
	deadline := time.Now().Add(60 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("the daemons did not program the node in 60 s; denied: %v\nflanneld:\n%s\nproxy:\n%s", enf.denied, procs["flanneld"].Log(), procs["proxy"].Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	enf.mu.Lock()
	defer enf.mu.Unlock()
	if len(enf.denied) > 0 {
		t.Errorf("requests the manifest's ClusterRole does not allow: %v", enf.denied)
	}
	// Granted but not exercised by one node's start and one Service,
	// each for a reason.
	// client-go's informers list through a watch that sends the initial
	// state (WatchList); against a server without it they fall back to a
	// plain list, so the role keeps "list" for every watched resource.
	unexercised := map[string]string{
		"list /nodes":                          "WatchList",
		"list /services":                       "WatchList",
		"list discovery.k8s.io/endpointslices": "WatchList",
	}
	var unused []string
	for _, r := range enf.rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					key := fmt.Sprintf("%s %s/%s", v, g, res)
					if !enf.seen[key] && unexercised[key] == "" {
						unused = append(unused, key)
					}
				}
			}
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		var seen []string
		for k := range enf.seen {
			seen = append(seen, k)
		}
		sort.Strings(seen)
		t.Errorf("the ClusterRole grants what the daemons never asked for: %v\n(they asked for %v)", unused, seen)
	}
}
