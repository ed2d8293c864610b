package flanneld

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/subnetenv"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// TestWaitsForPodCIDR: without a podCIDR the daemon waits — alive, not
// ready, saying why — instead of crash-looping; subnet.env and the CNI
// conflist appear only once it is up, in that order.
func TestWaitsForPodCIDR(t *testing.T) {
	nettest.RequirePrivileged(t)
	api := testapi.Start(t)
	c := newTestCluster(t, api, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, 1)
	nd := c.nodes[0]
	d, err := New(c.options(nd))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testapi.Context(t)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	h := d.Handler()
	testapi.Eventually(t, 10*time.Second, "waiting reported", func() bool {
		code, body := get(t, h, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "podCIDR")
	})
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run returned while waiting: %v", err)
	default:
	}
	// Upstream flanneld v0.28.10's answers, byte for byte.
	if code, body := get(t, h, "/healthz"); code != http.StatusOK || body != "flanneld is running" {
		t.Fatalf("/healthz %d %q while waiting", code, body)
	}
	if code, body := get(t, h, "/readyz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "flanneld is not ready yet") {
		t.Fatalf("/readyz %d %q while waiting", code, body)
	}
	for _, f := range []string{d.opts.SubnetFile, d.opts.InstallCNIConf} {
		if _, err := os.Stat(f); err == nil {
			t.Fatalf("%s exists before the node has a subnet", f)
		}
	}
	patch := []byte(`{"spec":{"podCIDR":"10.244.7.0/24","podCIDRs":["10.244.7.0/24"]}}`)
	if _, err := api.Client.CoreV1().Nodes().Patch(ctx, nd.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, 10*time.Second, "ready", func() bool {
		code, body := get(t, h, "/readyz")
		return code == http.StatusOK && body == "flanneld is ready"
	})
	env, err := subnetenv.Read(d.opts.SubnetFile)
	if err != nil || env.Subnet.String() != "10.244.7.1/24" || env.MTU != 1450 {
		t.Fatalf("subnet.env %+v (%v)", env, err)
	}
	se, _ := os.Stat(d.opts.SubnetFile)
	cc, err := os.Stat(d.opts.InstallCNIConf)
	if err != nil || cc.ModTime().Before(se.ModTime()) {
		t.Fatalf("conflist %v written before subnet.env %v (%v)", cc, se, err)
	}
	code, metrics := get(t, h, "/metrics")
	for _, want := range []string{"nodenet_flanneld_ready 1", "nodenet_flanneld_sync_duration_seconds_count", `nodenet_flanneld_programmed_entries{kind="route"} 0`} {
		if code != http.StatusOK || !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
}

// TestLeaseModeDaemons: two nodes in lease mode, no node IPAM controller:
// each claims a subnet itself, pods ping across, and a restarted daemon
// keeps its subnet.
func TestLeaseModeDaemons(t *testing.T) {
	nettest.RequirePrivileged(t)
	api := testapi.Start(t)
	c := newTestCluster(t, api, `{"Network":"10.246.0.0/16","Backend":{"Type":"vxlan"}}`, 2)
	subnets := map[string]netip.Prefix{}
	for _, nd := range c.nodes {
		o := c.options(nd)
		o.SubnetLease, o.Lease = true, LeaseOptions{Namespace: "kube-flannel", TTL: time.Minute}
		c.startWith(nd, o)
		env, err := subnetenv.Read(o.SubnetFile)
		if err != nil {
			t.Fatal(err)
		}
		subnets[nd.name] = env.Subnet.Masked()
		c.wirePodIn(nd, env.Subnet.Masked())
	}
	n1, n2 := c.nodes[0], c.nodes[1]
	if subnets[n1.name] == subnets[n2.name] {
		t.Fatalf("both nodes hold %s", subnets[n1.name])
	}
	mustPing(t, n1.pod, n2.podIP)
	mustPing(t, n2.pod, n1.podIP)
	c.stop(n2)
	o := c.options(n2)
	o.SubnetLease, o.Lease = true, LeaseOptions{Namespace: "kube-flannel", TTL: time.Minute}
	c.startWith(n2, o)
	if env, _ := subnetenv.Read(o.SubnetFile); env.Subnet.Masked() != subnets[n2.name] {
		t.Fatalf("restart moved %s from %s to %s", n2.name, subnets[n2.name], env.Subnet)
	}
	mustPing(t, n1.pod, n2.podIP)
	// Lease mode sets the node condition too when a Node exists.
	n, err := api.Client.CoreV1().Nodes().Get(t.Context(), n1.name, metav1.GetOptions{})
	if err != nil || len(n.Status.Conditions) == 0 || n.Status.Conditions[0].Type != corev1.NodeNetworkUnavailable {
		t.Fatalf("conditions %+v (%v)", n.Status.Conditions, err)
	}
}
