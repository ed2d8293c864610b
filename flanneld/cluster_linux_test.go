package flanneld

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/controllers/nodeipam"
	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/routes"
)

// testCluster is the local-cluster layout of the issue: a "lan" namespace
// whose bridge is the node network, node namespaces with eth0 on it, one
// pod namespace per node wired by hand (the CNI plugin's job elsewhere),
// an API server and the node IPAM controller.
type testCluster struct {
	t     *testing.T
	api   *testapi.Server
	lan   *nettest.NS
	conf  string
	nodes []*testNode
	// dual gives nodes and pods IPv6 addresses too.
	dual bool
}

type testNode struct {
	name  string
	ip    netip.Addr // on the node network
	ns    *nettest.NS
	pod   *nettest.NS
	podIP netip.Addr
	pod6  netip.Addr
	dir   string
	d     *Daemon
	stop  context.CancelFunc
	done  chan error
}

const clusterCIDR = "10.244.0.0/16"

func newTestCluster(t *testing.T, api *testapi.Server, netConf string, n int) *testCluster {
	return newTestClusterDual(t, api, netConf, n, false)
}

func newTestClusterDual(t *testing.T, api *testapi.Server, netConf string, n int, dual bool) *testCluster {
	t.Helper()
	c := &testCluster{t: t, api: api, lan: nettest.New(t), conf: filepath.Join(t.TempDir(), "net-conf.json"), dual: dual}
	if err := os.WriteFile(c.conf, []byte(netConf), 0o644); err != nil {
		t.Fatal(err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := c.lan.Handle().LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	if err := c.lan.Handle().LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		c.addNode(fmt.Sprintf("%s-node-%d", t.Name()[strings.LastIndex(t.Name(), "/")+1:], i), i)
	}
	return c
}

func (c *testCluster) addNode(name string, i int) *testNode {
	t := c.t
	nd := &testNode{name: strings.ToLower(name), ip: netip.MustParseAddr(fmt.Sprintf("192.168.50.%d", 10+i)), ns: nettest.New(t), dir: t.TempDir()}
	lanIf := fmt.Sprintf("n%d", i)
	nettest.Link(t, c.lan, lanIf, "", nd.ns, "eth0", nd.ip.String()+"/24")
	l, err := c.lan.Handle().LinkByName(lanIf)
	if err != nil {
		t.Fatal(err)
	}
	br, _ := c.lan.Handle().LinkByName("br0")
	if err := c.lan.Handle().LinkSetMaster(l, br); err != nil {
		t.Fatal(err)
	}
	if err := nd.ns.Do(func() error {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			return err
		}
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	if c.dual {
		nd.ns.MustExec(t, "ip", "addr", "add", fmt.Sprintf("fd00:50::%d/64", 10+i), "dev", "eth0", "nodad")
	}
	_, err = c.api.Client.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nd.name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, nd)
	return nd
}

// startIPAM runs the node IPAM controller for the test.
func startIPAM(t *testing.T, api *testapi.Server, cidrs ...string) {
	t.Helper()
	if len(cidrs) == 0 {
		cidrs = []string{clusterCIDR}
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(api.Client, 0)
	ctrl, err := nodeipam.New(api.Client, factory, nodeipam.Options{ClusterCIDRs: cidrlist.MustParse(cidrs...)}, nil, testapi.Logger())
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { ctrl.Run(ctx, 2); close(done) }()
	t.Cleanup(func() { cancel(); <-done; factory.Shutdown() })
}

func (c *testCluster) options(nd *testNode) Options {
	return Options{
		NodeName:                  nd.name,
		Client:                    kubernetes.NewForConfigOrDie(c.api.Config),
		Netns:                     Netns(nd.ns.Name()),
		NetConfPath:               c.conf,
		Iface:                     IfaceOptions{Ifaces: []string{"eth0"}},
		IPMasq:                    true,
		IPTablesResync:            time.Second,
		SubnetFile:                filepath.Join(nd.dir, "subnet.env"),
		InstallCNIConf:            filepath.Join(nd.dir, "net.d", "10-nodenet.conflist"),
		SetNodeNetworkUnavailable: true,
		ResyncPeriod:              2 * time.Second,
		MinSyncPeriod:             10 * time.Millisecond,
		Logger:                    testapi.Logger().With("node", nd.name),
	}
}

// start runs a daemon for nd and waits until it is ready.
func (c *testCluster) start(nd *testNode) { c.startWith(nd, c.options(nd)) }

func (c *testCluster) startWith(nd *testNode, o Options) {
	t := c.t
	t.Helper()
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	nd.d, nd.stop, nd.done = d, cancel, make(chan error, 1)
	go func() { nd.done <- d.Run(ctx) }()
	t.Cleanup(func() { c.stop(nd) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ok, _ := d.Ready(); ok {
			return
		}
		select {
		case err := <-nd.done:
			nd.done <- err
			t.Fatalf("%s: daemon exited before ready: %v", nd.name, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_, why := d.Ready()
			t.Fatalf("%s: not ready after 30s: %s", nd.name, why)
		}
	}
}

// stop cancels the daemon as SIGTERM does and checks it exits cleanly.
func (c *testCluster) stop(nd *testNode) {
	if nd.stop == nil {
		return
	}
	nd.stop()
	select {
	case err := <-nd.done:
		if err != nil {
			c.t.Errorf("%s: Run returned %v on cancel, want nil", nd.name, err)
		}
	case <-time.After(20 * time.Second):
		c.t.Errorf("%s: Run did not return after cancel", nd.name)
	}
	nd.stop = nil
}

// subnet returns the podCIDR the IPAM controller gave nd.
func (c *testCluster) subnet(nd *testNode) netip.Prefix {
	t := c.t
	t.Helper()
	var p netip.Prefix
	testapi.Eventually(t, 20*time.Second, nd.name+" podCIDR", func() bool {
		n, err := c.api.Client.CoreV1().Nodes().Get(t.Context(), nd.name, metav1.GetOptions{})
		if err != nil || n.Spec.PodCIDR == "" {
			return false
		}
		p = netip.MustParsePrefix(n.Spec.PodCIDR)
		return true
	})
	return p
}

// wirePod gives nd a pod: a namespace with eth0 = subnet .2, its gateway
// .1 on the node side, as the CNI bridge plugin would.
func (c *testCluster) wirePod(nd *testNode) { c.wirePodIn(nd, c.subnet(nd)) }

func (c *testCluster) wirePodIn(nd *testNode, sn netip.Prefix) {
	t := c.t
	gw := sn.Addr().Next()
	nd.podIP = gw.Next()
	nd.pod = nettest.New(t)
	nettest.Link(t, nd.ns, "vpod", fmt.Sprintf("%s/%d", gw, sn.Bits()), nd.pod, "eth0", fmt.Sprintf("%s/%d", nd.podIP, sn.Bits()))
	nd.pod.MustExec(t, "ip", "route", "add", "default", "via", gw.String())
	if c.dual {
		sn6 := c.subnet6(nd)
		gw6 := sn6.Addr().Next()
		nd.pod6 = gw6.Next()
		nd.ns.MustExec(t, "ip", "addr", "add", fmt.Sprintf("%s/%d", gw6, sn6.Bits()), "dev", "vpod", "nodad")
		nd.pod.MustExec(t, "ip", "addr", "add", fmt.Sprintf("%s/%d", nd.pod6, sn6.Bits()), "dev", "eth0", "nodad")
		nd.pod.MustExec(t, "ip", "-6", "route", "add", "default", "via", gw6.String())
	}
}

// subnet6 returns nd's IPv6 podCIDR.
func (c *testCluster) subnet6(nd *testNode) netip.Prefix {
	t := c.t
	t.Helper()
	var p netip.Prefix
	testapi.Eventually(t, 20*time.Second, nd.name+" IPv6 podCIDR", func() bool {
		n, err := c.api.Client.CoreV1().Nodes().Get(t.Context(), nd.name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, s := range n.Spec.PodCIDRs {
			if q := netip.MustParsePrefix(s); q.Addr().Is6() {
				p = q
				return true
			}
		}
		return false
	})
	return p
}

// kernelState is what a node's namespace holds for its peers.
type kernelState struct {
	routes []routes.Route
	neigh  []routes.Neigh
	fdb    []routes.FDBEntry
}

func readKernel(t *testing.T, nd *testNode, dev string) kernelState {
	t.Helper()
	var s kernelState
	tbl, err := routes.NewNetlinkTable(nd.ns.Name(), 0, routes.ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	if s.routes, err = tbl.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	if dev == "" {
		return s
	}
	nt, err := routes.NewNeighTable(nd.ns.Name(), dev)
	if err != nil {
		t.Fatal(err)
	}
	defer nt.Close()
	if s.neigh, err = nt.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	ft, err := routes.NewFDBTable(nd.ns.Name(), dev)
	if err != nil {
		t.Fatal(err)
	}
	defer ft.Close()
	if s.fdb, err = ft.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s kernelState) routeTo(p netip.Prefix) (routes.Route, bool) {
	for _, r := range s.routes {
		if r.Dst == p {
			return r, true
		}
	}
	return routes.Route{}, false
}

func (s kernelState) neighFor(ip netip.Addr) (routes.Neigh, bool) {
	for _, n := range s.neigh {
		if n.IP == ip {
			return n, true
		}
	}
	return routes.Neigh{}, false
}

func (s kernelState) fdbFor(mac string) (routes.FDBEntry, bool) {
	for _, e := range s.fdb {
		if e.MAC.String() == mac {
			return e, true
		}
	}
	return routes.FDBEntry{}, false
}
