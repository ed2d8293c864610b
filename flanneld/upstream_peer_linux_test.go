package flanneld

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/internal/upstream"
	"github.com/nodenet/nodenet/subnetenv"
)

// TestUpstreamFlanneldPeering is issue 11 item 1's proof: upstream flanneld
// (built from the module proxy) on one node and nodenet flanneld on the
// other, both against the bundled API server, per backend. Upstream
// publishes its annotations with a PATCH of nodes/<name>/status; nodenet
// must see them and program routes (and for vxlan neighbour + FDB entries)
// to upstream's podCIDR, and upstream must do the same for nodenet's.
// Pods behind cni0-like bridges on both nodes ping each other both ways.
func TestUpstreamFlanneldPeering(t *testing.T) {
	nettest.SkipShort(t, "runs upstream flanneld")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "iptables")
	bin := upstream.Flanneld(t)
	api := testapi.Start(t)
	startIPAM(t, api)
	for _, tc := range []struct {
		name, conf, dev string
		mtu             int
	}{
		{"vxlan", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, "flannel.1", 1450},
		{"hostgw", `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`, "", 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, api, tc.conf, 2)
			ours, theirs := c.nodes[0], c.nodes[1]
			c.start(ours)
			up := startUpstreamFlanneld(t, c, theirs, bin)
			ourSN, theirSN := c.subnet(ours), c.subnet(theirs)

			t.Run("upstream-published", func(t *testing.T) {
				env := up.waitSubnetEnv(t)
				want := subnetenv.FromSubnets(netip.MustParsePrefix(clusterCIDR), theirSN, netip.Prefix{}, netip.Prefix{}, tc.mtu, false)
				if env != want {
					t.Errorf("upstream subnet.env %+v, want %+v", env, want)
				}
				checkUpstreamAnnotations(t, c, theirs, tc.dev)
			})
			t.Run("nodenet-published", func(t *testing.T) { checkPublished(t, c, ours, tc.dev, tc.mtu) })
			t.Run("nodenet-programs-upstream-peer", func(t *testing.T) {
				testapi.Eventually(t, 30*time.Second, "nodenet's route to upstream's podCIDR", func() bool {
					return hasPeerState(t, ours, theirs, theirSN, tc.dev)
				})
			})
			t.Run("upstream-programs-nodenet-peer", func(t *testing.T) {
				testapi.Eventually(t, 30*time.Second, "upstream's route to nodenet's podCIDR", func() bool {
					return hasPeerState(t, theirs, ours, ourSN, tc.dev)
				})
			})
			t.Run("ping", func(t *testing.T) {
				wireBridgePod(t, ours, ourSN)
				wireBridgePod(t, theirs, theirSN)
				mustPing(t, ours.pod, theirs.podIP)
				mustPing(t, theirs.pod, ours.podIP)
			})
			if t.Failed() {
				t.Logf("upstream flanneld log:\n%s", up.Log())
			}
		})
	}
}

// hasPeerState reports whether nd's kernel reaches peer's podCIDR sn the
// way flannel programs it: host-gw a route via the peer's node IP; vxlan a
// route via the peer's VTEP (sn's network address) on dev, plus the
// neighbour (VTEP IP → VtepMAC) and FDB (VtepMAC → node IP) entries.
func hasPeerState(t *testing.T, nd, peer *testNode, sn netip.Prefix, dev string) bool {
	t.Helper()
	rs, err := nd.ns.Handle().RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{Dst: &net.IPNet{IP: sn.Addr().AsSlice(), Mask: net.CIDRMask(sn.Bits(), 32)}}, netlink.RT_FILTER_DST)
	if err != nil || len(rs) != 1 {
		return false
	}
	gw, _ := netip.AddrFromSlice(rs[0].Gw)
	if dev == "" {
		return gw.Unmap() == peer.ip
	}
	if gw.Unmap() != sn.Addr() {
		return false
	}
	mac := vtepMAC(peer)
	if mac == "" {
		return false
	}
	s := readKernel(t, nd, dev)
	n, nok := s.neighFor(sn.Addr())
	f, fok := s.fdbFor(mac)
	return nok && n.MAC.String() == mac && fok && f.Dst == peer.ip
}

// vtepMAC is the MAC of nd's VXLAN device ("" while there is none).
func vtepMAC(nd *testNode) string {
	l, err := nd.ns.Handle().LinkByName("flannel.1")
	if err != nil {
		return ""
	}
	return l.Attrs().HardwareAddr.String()
}

func checkUpstreamAnnotations(t *testing.T, c *testCluster, nd *testNode, dev string) {
	t.Helper()
	var a map[string]string
	testapi.Eventually(t, 30*time.Second, "upstream's annotations", func() bool {
		n, err := c.api.Client.CoreV1().Nodes().Get(t.Context(), nd.name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		a = n.Annotations
		return a[AnnPublicIP] != ""
	})
	if a[AnnKubeSubnetManager] != "true" || a[AnnPublicIP] != nd.ip.String() || a[AnnBackendType] != c.nodeBackend() {
		t.Fatalf("upstream annotations %v", a)
	}
	if dev == "" {
		return
	}
	var d struct {
		VNI     int
		VtepMAC string
	}
	if err := json.Unmarshal([]byte(a[AnnBackendData]), &d); err != nil || d.VNI != 1 || d.VtepMAC != vtepMAC(nd) {
		t.Fatalf("upstream backend-data %q (device MAC %s): %v", a[AnnBackendData], vtepMAC(nd), err)
	}
}

// wireBridgePod gives nd a pod as the CNI bridge plugin does: a cni0
// bridge holding the gateway (sn .1), the pod's veth enslaved to it, the
// pod at sn .2 with a default route via the gateway.
func wireBridgePod(t *testing.T, nd *testNode, sn netip.Prefix) {
	t.Helper()
	gw := sn.Addr().Next()
	nd.podIP = gw.Next()
	nd.pod = nettest.New(t)
	nd.ns.MustExec(t, "ip", "link", "add", "cni0", "type", "bridge")
	nd.ns.MustExec(t, "ip", "addr", "add", fmt.Sprintf("%s/%d", gw, sn.Bits()), "dev", "cni0")
	nd.ns.MustExec(t, "ip", "link", "set", "cni0", "up")
	nettest.Link(t, nd.ns, "veth0", "", nd.pod, "eth0", fmt.Sprintf("%s/%d", nd.podIP, sn.Bits()))
	nd.ns.MustExec(t, "ip", "link", "set", "veth0", "master", "cni0")
	nd.pod.MustExec(t, "ip", "route", "add", "default", "via", gw.String())
}

// upstreamFlanneld is one running upstream flanneld process.
type upstreamFlanneld struct {
	*nettest.Process
	subnetFile string
}

// startUpstreamFlanneld runs upstream flanneld inside nd's namespace with
// its own copy of the test's net-conf.json, against the API server reached
// through a forwarder on the namespace's loopback (the API server listens
// on the root namespace's loopback, which the node namespace cannot see).
func startUpstreamFlanneld(t *testing.T, c *testCluster, nd *testNode, bin string) *upstreamFlanneld {
	t.Helper()
	apiURL, err := url.Parse(c.api.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	nettest.ForwardLoopback(t, nd.ns, apiURL.Host)
	// Upstream assigns into the Node's annotation map without creating it
	// (kube.go AcquireLease): it panics on a Node without annotations. A
	// kubelet always registers its Node with some; so does this test.
	patch := []byte(`{"metadata":{"annotations":{"volumes.kubernetes.io/controller-managed-attach-detach":"true"}}}`)
	if _, err := c.api.Client.CoreV1().Nodes().Patch(t.Context(), nd.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate node as a kubelet would: %v", err)
	}
	u := &upstreamFlanneld{subnetFile: filepath.Join(nd.dir, "subnet.env")}
	u.Process = nettest.StartProcess(t, nd.ns, []string{"NODE_NAME=" + nd.name}, bin,
		"--kube-subnet-mgr", "--kubeconfig-file="+c.api.KubeconfigPath(), "--iface=eth0",
		"--net-config-path="+c.conf, "--subnet-file="+u.subnetFile, "--ip-masq=false", "-v=2")
	return u
}

// waitSubnetEnv waits for upstream's subnet.env and reads it.
func (u *upstreamFlanneld) waitSubnetEnv(t *testing.T) subnetenv.Env {
	t.Helper()
	var env subnetenv.Env
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		if env, err = subnetenv.Read(u.subnetFile); err == nil {
			return env
		}
		if u.Exited() != nil || time.Now().After(deadline) {
			t.Fatalf("upstream flanneld wrote no subnet.env (%v); log:\n%s", err, u.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
