package flanneld

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/subnetenv"
)

// TestMultiNode is the end-to-end test, once per backend: three
// nodes on one L2 network, an API server with the node IPAM controller,
// one flanneld per node, a pod per node; pods ping across nodes, a daemon
// restarts without losing a ping, a deleted node disappears from every
// other node's kernel.
func TestMultiNode(t *testing.T) {
	nettest.SkipShort(t, "daemons on several node namespaces")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "iptables-save")
	api := testapi.Start(t)
	startIPAM(t, api)
	for _, tc := range []struct {
		name, conf, dev string
		mtu             int
	}{
		{"hostgw", `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`, "", 1500},
		{"vxlan", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`, "flannel.1", 1450},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, api, tc.conf, 3)
			c.lan.MustExec(t, "ip", "addr", "add", "192.168.50.1/24", "dev", "br0")
			for _, nd := range c.nodes {
				c.start(nd)
				c.wirePod(nd)
			}
			n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
			t.Run("ping", func(t *testing.T) {
				mustPing(t, n1.pod, n2.podIP)
				mustPing(t, n1.pod, n3.podIP)
				mustPing(t, n2.pod, n3.podIP)
				mustPing(t, n3.pod, n1.podIP)
			})
			t.Run("published", func(t *testing.T) { checkPublished(t, c, n1, tc.dev, tc.mtu) })
			t.Run("masquerade", func(t *testing.T) {
				// The "router" has no route to pods: only a masqueraded
				// echo can come back.
				mustPing(t, n1.pod, netip.MustParseAddr("192.168.50.1"))
				if out := string(n1.ns.MustExec(t, "iptables-save", "-t", "nat")); strings.Count(out, "-j "+chainMasq) != 1 {
					t.Fatalf("want exactly one jump to %s:\n%s", chainMasq, out)
				}
			})
			if tc.dev != "" {
				t.Run("device", func(t *testing.T) { checkVXLANDevice(t, n1) })
				t.Run("peer-mac-change", func(t *testing.T) { testPeerMACChange(t, c, n1) })
			} else {
				t.Run("refuse-off-l2-peer", func(t *testing.T) { testOffL2Peer(t, c, n1) })
			}
			t.Run("restart-without-loss", func(t *testing.T) { testRestart(t, c, n1, n2, tc.dev) })
			if tc.dev != "" {
				t.Run("vtep-mac-survives-reboot", func(t *testing.T) { testMACSurvivesReboot(t, c, n1, n2) })
				t.Run("device-deleted-while-running", func(t *testing.T) { testDeviceRecreated(t, n1, n2) })
			}
			t.Run("node-deleted", func(t *testing.T) { testNodeDeleted(t, c, n3, []*testNode{n1, n2}, tc.dev) })
		})
	}
}

func checkPublished(t *testing.T, c *testCluster, nd *testNode, dev string, mtu int) {
	sn := c.subnet(nd)
	env, err := subnetenv.Read(nd.d.opts.SubnetFile)
	if err != nil {
		t.Fatal(err)
	}
	want := subnetenv.FromSubnets(netip.MustParsePrefix(clusterCIDR), sn, netip.Prefix{}, netip.Prefix{}, mtu, true)
	if env != want {
		t.Fatalf("subnet.env %+v, want %+v", env, want)
	}
	conf, err := os.ReadFile(nd.d.opts.InstallCNIConf)
	if err != nil {
		t.Fatal(err)
	}
	var cl struct {
		Name    string
		Plugins []map[string]any
	}
	if err := json.Unmarshal(conf, &cl); err != nil || cl.Name != "cbr0" || cl.Plugins[0]["type"] != "nodenet" ||
		cl.Plugins[0]["subnetFile"] != nd.d.opts.SubnetFile || cl.Plugins[1]["type"] != "portmap" {
		t.Fatalf("conflist %s (%v)", conf, err)
	}
	n, err := c.api.Client.CoreV1().Nodes().Get(t.Context(), nd.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := n.Annotations
	if a[AnnKubeSubnetManager] != "true" || a[AnnPublicIP] != nd.ip.String() || a[AnnBackendType] != c.nodeBackend() {
		t.Fatalf("annotations %v", a)
	}
	if dev != "" {
		var d struct {
			VNI     int
			VtepMAC string
		}
		if err := json.Unmarshal([]byte(a[AnnBackendData]), &d); err != nil || d.VNI != 1 {
			t.Fatalf("backend-data %q: %v", a[AnnBackendData], err)
		}
		l, err := nd.ns.Handle().LinkByName(dev)
		if err != nil || l.Attrs().HardwareAddr.String() != d.VtepMAC {
			t.Fatalf("VtepMAC %s, device %v (%v)", d.VtepMAC, l, err)
		}
	} else if a[AnnBackendData] != "null" {
		t.Fatalf("host-gw backend-data %q, upstream writes null", a[AnnBackendData])
	}
	found := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeNetworkUnavailable {
			found = cond.Status == corev1.ConditionFalse && cond.Reason == ConditionReasonFlannelUp
		}
	}
	if !found {
		t.Fatalf("conditions %+v: want NetworkUnavailable=False reason FlannelIsUp", n.Status.Conditions)
	}
	if ok, why := nd.d.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
}

func (c *testCluster) nodeBackend() string {
	cfg, _ := os.ReadFile(c.conf)
	if strings.Contains(string(cfg), "host-gw") {
		return BackendHostGW
	}
	return BackendVXLAN
}

func checkVXLANDevice(t *testing.T, nd *testNode) {
	l, err := nd.ns.Handle().LinkByName("flannel.1")
	if err != nil {
		t.Fatal(err)
	}
	v := l.(*netlink.Vxlan)
	if v.VxlanId != 1 || v.Port != 8472 || v.Learning || v.MTU != 1450 || v.SrcAddr.String() != nd.ip.String() {
		t.Fatalf("flannel.1: vni %d port %d learning %v mtu %d local %s", v.VxlanId, v.Port, v.Learning, v.MTU, v.SrcAddr)
	}
	want, _, _ := txCsumMetric(t, nd.d)
	if on, err := txChecksum(Netns(nd.ns.Name()), "flannel.1", false, false); err != nil || on != want {
		t.Fatalf("tx checksum offload on=%v (%v), want %v as decided", on, err, want)
	}
	addrs, _ := nd.ns.Handle().AddrList(l, netlink.FAMILY_V4)
	sn := nd.d.cfg // keep vet quiet about unused
	_ = sn
	if len(addrs) != 1 || !strings.HasSuffix(addrs[0].IPNet.String(), ".0/32") {
		t.Fatalf("flannel.1 addresses %v, want the subnet's .0/32", addrs)
	}
}

// testPeerMACChange adds a peer the way an upstream flannel node appears
// (annotations only), changes its VTEP MAC as a rebooted node would, and
// checks the neighbour and FDB entry follow (upstream #1788).
func testPeerMACChange(t *testing.T, c *testCluster, nd *testNode) {
	ctx := t.Context()
	name := nd.name + "-ghost"
	ann := func(mac string) map[string]string {
		return map[string]string{AnnKubeSubnetManager: "true", AnnBackendType: "vxlan", AnnPublicIP: "192.168.50.99",
			AnnBackendData: fmt.Sprintf(`{"VNI":1,"VtepMAC":"%s"}`, mac)}
	}
	_, err := c.api.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann("02:00:00:00:99:01")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ghost := &testNode{name: name}
	sn := c.subnet(ghost)
	waitKernel(t, nd, "flannel.1", "ghost programmed", func(s kernelState) bool {
		r, ok := s.routeTo(sn)
		n, nok := s.neighFor(sn.Addr())
		f, fok := s.fdbFor("02:00:00:00:99:01")
		return ok && r.Dev == "flannel.1" && r.Gw == sn.Addr() && nok && n.MAC.String() == "02:00:00:00:99:01" && fok && f.Dst.String() == "192.168.50.99"
	})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann("02:00:00:00:99:02")}})
	if _, err := c.api.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKernel(t, nd, "flannel.1", "ghost's new MAC", func(s kernelState) bool {
		n, nok := s.neighFor(sn.Addr())
		_, oldFDB := s.fdbFor("02:00:00:00:99:01")
		f, fok := s.fdbFor("02:00:00:00:99:02")
		return nok && n.MAC.String() == "02:00:00:00:99:02" && !oldFDB && fok && f.Dst.String() == "192.168.50.99"
	})
	if err := c.api.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKernel(t, nd, "flannel.1", "ghost removed", func(s kernelState) bool {
		_, r := s.routeTo(sn)
		_, n := s.neighFor(sn.Addr())
		_, f := s.fdbFor("02:00:00:00:99:02")
		return !r && !n && !f
	})
}

// testOffL2Peer: a host-gw peer whose public IP is not on our network gets
// no route, and is counted as unreachable.
func testOffL2Peer(t *testing.T, c *testCluster, nd *testNode) {
	ctx := t.Context()
	name := nd.name + "-far"
	_, err := c.api.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
		AnnKubeSubnetManager: "true", AnnBackendType: "host-gw", AnnPublicIP: "10.99.0.7", AnnBackendData: "null"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sn := c.subnet(&testNode{name: name})
	testapi.Eventually(t, 10*time.Second, "peer counted unreachable", func() bool { return gaugeValue(nd.d.m.peerErrors) == 1 })
	if _, ok := readKernel(t, nd, "").routeTo(sn); ok {
		t.Fatalf("route to %s via an off-L2 peer was installed", sn)
	}
	if err := c.api.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, 10*time.Second, "peer error cleared", func() bool { return gaugeValue(nd.d.m.peerErrors) == 0 })
}

// testRestart stops nd2's daemon as SIGTERM would and starts a new one
// while pod1 pings pod2 every 10 ms: not one echo may be lost, and the
// vxlan device must be the same device afterwards.
func testRestart(t *testing.T, c *testCluster, n1, n2 *testNode, dev string) {
	var before netlink.Link
	if dev != "" {
		before, _ = n2.ns.Handle().LinkByName(dev)
	}
	p := newPinger(t, n1.pod, n2.podIP)
	if !p.once(2 * time.Second) {
		t.Fatal("no reply before the restart")
	}
	stopFlood := make(chan struct{})
	flooded := make(chan [2]uint16)
	go func() {
		first := p.send()
		last := first
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopFlood:
				flooded <- [2]uint16{first, last}
				return
			case <-tick.C:
				last = p.send()
			}
		}
	}()
	// Watch n2's routes: a restart that converges without flapping
	// neither deletes nor replaces any of them.
	updates := make(chan netlink.RouteUpdate, 256)
	stopWatch := make(chan struct{})
	nsh := netns.NsHandle(n2.ns.Fd())
	if err := netlink.RouteSubscribeWithOptions(updates, stopWatch, netlink.RouteSubscribeOptions{Namespace: &nsh}); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		churn []string
	)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for u := range updates {
			if u.Dst != nil && strings.HasPrefix(u.Dst.String(), "10.244.") {
				mu.Lock()
				churn = append(churn, fmt.Sprintf("type %d %s", u.Type, u.Dst))
				mu.Unlock()
			}
		}
	}()
	// Positive control: the watch does see changes.
	n2.ns.MustExec(t, "ip", "route", "add", "10.244.250.0/24", "dev", "eth0")
	n2.ns.MustExec(t, "ip", "route", "del", "10.244.250.0/24", "dev", "eth0")
	// Counted by the control route's own events: a change of another
	// 10.244 route still settling from the last subtest may come too.
	testapi.Eventually(t, 5*time.Second, "route watch sees the control route", func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen := 0
		for _, c := range churn {
			if strings.HasSuffix(c, " 10.244.250.0/24") {
				seen++
			}
		}
		return seen == 2
	})
	mu.Lock()
	churn = nil
	mu.Unlock()
	time.Sleep(200 * time.Millisecond)
	c.stop(n2)
	if s := readKernel(t, n2, dev); len(s.routes) != 2 {
		t.Fatalf("after SIGTERM %d routes remain, want 2 (the data plane stays)", len(s.routes))
	}
	time.Sleep(300 * time.Millisecond)
	c.start(n2)
	time.Sleep(500 * time.Millisecond)
	close(stopFlood)
	r := <-flooded
	time.Sleep(300 * time.Millisecond)
	if lost := p.lost(r[0], r[1]); len(lost) > 0 {
		t.Fatalf("%d of %d pings lost across the restart: %v", len(lost), r[1]-r[0]+1, lost)
	}
	t.Logf("%d pings across the restart, none lost", r[1]-r[0]+1)
	close(stopWatch)
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if len(churn) > 0 {
		t.Fatalf("routes changed during the restart: %v", churn)
	}
	if dev != "" {
		after, err := n2.ns.Handle().LinkByName(dev)
		if err != nil || after.Attrs().Index != before.Attrs().Index || after.Attrs().HardwareAddr.String() != before.Attrs().HardwareAddr.String() {
			t.Fatalf("vxlan device replaced on restart: %v -> %v (%v)", before.Attrs(), after, err)
		}
	}
}

func testNodeDeleted(t *testing.T, c *testCluster, gone *testNode, others []*testNode, dev string) {
	sn := c.subnet(gone)
	var mac string
	if dev != "" {
		l, _ := gone.ns.Handle().LinkByName(dev)
		mac = l.Attrs().HardwareAddr.String()
	}
	if err := c.api.Client.CoreV1().Nodes().Delete(t.Context(), gone.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, nd := range others {
		waitKernel(t, nd, dev, gone.name+" removed from "+nd.name, func(s kernelState) bool {
			_, r := s.routeTo(sn)
			_, n := s.neighFor(sn.Addr())
			_, f := s.fdbFor(mac)
			return !r && !n && !f && len(s.routes) == 1
		})
	}
	mustNotPing(t, others[0].pod, gone.podIP)
	c.stop(gone)
}

func waitKernel(t *testing.T, nd *testNode, dev, what string, cond func(kernelState) bool) {
	t.Helper()
	testapi.Eventually(t, 15*time.Second, what, func() bool { return cond(readKernel(t, nd, dev)) })
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	_ = g.Write(&m)
	return m.GetGauge().GetValue()
}

// testMACSurvivesReboot: n2 "reboots" (daemon stopped, flannel.1 gone with
// everything through it); the new device gets the MAC n2 published, so
// the peers' neighbour and FDB entries are right before they even hear of
// the restart.
func testMACSurvivesReboot(t *testing.T, c *testCluster, n1, n2 *testNode) {
	old, err := n2.ns.Handle().LinkByName("flannel.1")
	if err != nil {
		t.Fatal(err)
	}
	c.stop(n2)
	if err := n2.ns.Handle().LinkDel(old); err != nil {
		t.Fatal(err)
	}
	c.start(n2)
	cur, err := n2.ns.Handle().LinkByName("flannel.1")
	if err != nil {
		t.Fatal(err)
	}
	if cur.Attrs().Index == old.Attrs().Index || cur.Attrs().HardwareAddr.String() != old.Attrs().HardwareAddr.String() {
		t.Fatalf("after the reboot: index %d→%d, MAC %s→%s; want a new device with the old MAC",
			old.Attrs().Index, cur.Attrs().Index, old.Attrs().HardwareAddr, cur.Attrs().HardwareAddr)
	}
	want, _, _ := txCsumMetric(t, n2.d)
	if on, err := txChecksum(Netns(n2.ns.Name()), "flannel.1", false, false); err != nil || on != want {
		t.Fatalf("recreated device has tx checksum offload on=%v (%v), want %v as decided", on, err, want)
	}
	mustPing(t, n1.pod, n2.podIP)
	mustPing(t, n2.pod, n1.podIP)
}

// testDeviceRecreated: someone deletes flannel.1 under a running daemon;
// the next sync recreates it with the published MAC and the routes.
func testDeviceRecreated(t *testing.T, n1, n2 *testNode) {
	old, err := n2.ns.Handle().LinkByName("flannel.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := n2.ns.Handle().LinkDel(old); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, 10*time.Second, "flannel.1 recreated", func() bool {
		l, err := n2.ns.Handle().LinkByName("flannel.1")
		return err == nil && l.Attrs().HardwareAddr.String() == old.Attrs().HardwareAddr.String()
	})
	mustPing(t, n1.pod, n2.podIP)
}
