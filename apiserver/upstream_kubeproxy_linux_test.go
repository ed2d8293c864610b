package apiserver_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/internal/upstream"
)

// TestUpstreamKubeProxy is issue 11's proof with the real client: upstream
// kube-proxy v1.37.2, run the way a user runs it against `nodenet
// apiserver`, in a throwaway namespace per proxy mode. It must watch every
// type it asks for without a 404 (ServiceCIDR especially), program the
// Service and EndpointSlice the test creates (and, in nftables mode, the
// drop rule for unallocated ClusterIPs built from the default ServiceCIDR),
// report healthy, and its events.k8s.io/v1 "Starting" event must be
// readable through core/v1.
func TestUpstreamKubeProxy(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	nettest.RequireTool(t, "iptables-save")
	bin := upstream.KubeProxy(t)
	api := testapi.Start(t)
	cidr, err := api.Client.NetworkingV1().ServiceCIDRs().Get(t.Context(), "kubernetes", metav1.GetOptions{})
	if err != nil || len(cidr.Spec.CIDRs) != 1 {
		t.Fatalf("default ServiceCIDR: %v %v", cidr, err)
	}
	serviceCIDR := cidr.Spec.CIDRs[0]
	for _, tc := range []struct {
		mode string
		// rules dumps what the mode programs in the namespace.
		// rules lists kube-proxy's rules ("" while its table is missing).
		rules func(t *testing.T, ns *nettest.NS) string
		// want lists what rules must contain for the test's Service.
		want func(clusterIP string) []string
	}{
		{
			mode: "nftables",
			rules: func(t *testing.T, ns *nettest.NS) string {
				out, _ := ns.Exec(t.Context(), "nft", "list", "table", "ip", "kube-proxy")
				return string(out)
			},
			want: func(ip string) []string {
				return []string{ip, "kp-nftables/web/tcp/http", "dnat to 10.244.1.5:8080"}
			},
		},
		{
			mode: "iptables",
			rules: func(t *testing.T, ns *nettest.NS) string {
				out, _ := ns.Exec(t.Context(), "iptables-save", "-t", "nat")
				return string(out)
			},
			want: func(ip string) []string {
				return []string{"-d " + ip + "/32", `"kp-iptables/web:http cluster IP"`, "--to-destination 10.244.1.5:8080"}
			},
		},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			start := time.Now()
			node := "kp-" + tc.mode
			ns := nettest.New(t)
			kp := startKubeProxy(t, api, ns, bin, node, tc.mode)
			var rules string
			t.Cleanup(func() { // before kp is stopped: also after a Fatal
				if t.Failed() {
					t.Logf("kube-proxy log:\n%s\nlast rules read:\n%s", kp.Log(), rules)
				}
			})

			testapi.Eventually(t, 30*time.Second, "kube-proxy /healthz 200 after its first sync", func() bool {
				return kp.Exited() == nil && healthz(ns) == http.StatusOK
			})
			clusterIP := createWebService(t, api, node)
			testapi.Eventually(t, 15*time.Second, "kube-proxy's rules for the Service and its EndpointSlice", func() bool {
				rules = tc.rules(t, ns)
				return containsAll(rules, tc.want(clusterIP))
			})

			if tc.mode == "nftables" {
				// v1.37 writes `ip daddr { <ServiceCIDRs> } drop` into
				// cluster-ips-check at the first sync after its ServiceCIDR
				// informer delivered the default "kubernetes" ServiceCIDR.
				// Its first sync can run before that informer syncs (seen
				// once in CI) and a new ServiceCIDR does not ask for a sync,
				// so the rule may come only with the Service's sync above or
				// with the periodic one (--sync-period 30s).
				testapi.Eventually(t, 35*time.Second, "the unallocated-ClusterIP drop rule from the ServiceCIDR", func() bool {
					out, err := ns.Exec(t.Context(), "nft", "list", "chain", "ip", "kube-proxy", "cluster-ips-check")
					return err == nil && dropsServiceCIDR(string(out), serviceCIDR)
				})
			}

			checkStartingEvent(t, api, node)

			// Watches that 404 retry with backoff: give them the rest of the
			// window to show up in the log before reading it.
			if rest := 15*time.Second - time.Since(start); rest > 0 {
				time.Sleep(rest)
			}
			if err := kp.Exited(); err != nil {
				t.Fatalf("kube-proxy exited: %v", err)
			}
			log := kp.Log()
			// The positive side: every informer kube-proxy starts listed
			// and populated its cache (a 404 never gets here).
			for _, typ := range []string{"*v1.Node", "*v1.Service", "*v1.EndpointSlice", "*v1.ServiceCIDR"} {
				if !strings.Contains(log, `"Caches populated" type="`+typ+`"`) {
					t.Errorf("kube-proxy never populated its %s cache", typ)
				}
			}
			for _, bad := range []string{"Failed to watch", "could not find the requested resource", "failed to list"} {
				if strings.Contains(log, bad) {
					t.Errorf("kube-proxy log contains %q", bad)
				}
			}
		})
	}
}

// dropsServiceCIDR reports whether an nft chain listing drops traffic to
// cidr (nft prints a one-element anonymous set without its braces).
func dropsServiceCIDR(chain, cidr string) bool {
	for _, line := range strings.Split(chain, "\n") {
		if strings.Contains(line, "ip daddr") && strings.Contains(line, cidr) && strings.Contains(line, "drop") {
			return true
		}
	}
	return false
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// createWebService creates namespace kp-<mode> with Service web (port
// "http" 80 → 8080) and its EndpointSlice (one ready endpoint on node),
// and returns the allocated ClusterIP.
func createWebService(t *testing.T, api *testapi.Server, node string) string {
	t.Helper()
	ctx := t.Context()
	nsName := "kp-" + strings.TrimPrefix(node, "kp-")
	if _, err := api.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	svc, err := api.Client.CoreV1().Services(nsName).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	_, err = api.Client.DiscoveryV1().EndpointSlices(nsName).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "web-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "nodenet-test"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)},
			NodeName:   &node,
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo[int32](8080), Protocol: ptrTo(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create endpointslice: %v", err)
	}
	return svc.Spec.ClusterIP
}

func ptrTo[T any](v T) *T { return &v }

// checkStartingEvent: kube-proxy records its birth cry through
// events.k8s.io/v1 (regarding its Node, so in namespace default); the same
// stored Event must be listed by core/v1 clients such as kubectl.
func checkStartingEvent(t *testing.T, api *testapi.Server, node string) {
	t.Helper()
	var seen []string
	testapi.Eventually(t, 15*time.Second, "kube-proxy's Starting event through core/v1", func() bool {
		evs, err := api.Client.CoreV1().Events(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		seen = seen[:0]
		found := false
		for _, e := range evs.Items {
			seen = append(seen, fmt.Sprintf("%s/%s %s %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Reason, e.ReportingController))
			found = found || e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == node && e.Reason == "Starting" &&
				e.ReportingController == "kube-proxy" && e.Type == corev1.EventTypeNormal
		}
		return found
	})
	t.Logf("core/v1 events in default: %v", seen)
}

// healthz GETs kube-proxy's /healthz on ns's loopback (0 when unreachable).
func healthz(ns *nettest.NS) int {
	c := http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := ns.Do(func() error { // the socket stays in ns once made
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://127.0.0.1:10256/healthz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// startKubeProxy registers node as a kubelet would (with an InternalIP local
// to ns) and runs kube-proxy for it inside ns, against
// the API server reached through a loopback forwarder in ns.
func startKubeProxy(t *testing.T, api *testapi.Server, ns *nettest.NS, bin, node, mode string) *nettest.Process {
	t.Helper()
	const nodeIP = "192.168.77.2"
	// On lo: kube-proxy only needs the node IP to be local (the image
	// has no dummy link type).
	ns.MustExec(t, "ip", "addr", "add", nodeIP+"/32", "dev", "lo")
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{corev1.LabelHostname: node}}}
	n, err := api.Client.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}, {Type: corev1.NodeHostName, Address: node}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := api.Client.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set node status: %v", err)
	}
	u, err := url.Parse(api.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	nettest.ForwardLoopback(t, ns, u.Host)

	return nettest.StartProcess(t, ns, nil, bin,
		"--kubeconfig="+api.KubeconfigPath(), "--proxy-mode="+mode, "--hostname-override="+node,
		"--cluster-cidr=10.244.0.0/16",
		"--healthz-bind-address=127.0.0.1:10256", "--metrics-bind-address=127.0.0.1:10249",
		// nf_conntrack_max is not per namespace: leave the host's alone.
		"--conntrack-max-per-core=0",
		"-v=2")
}
