package bench

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/flanneld"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/routes"
)

var (
	flagFlannelPeers = flag.Int("nodenet.flanneld.peers", 1000, "peer Nodes created at once in BenchmarkFlanneldConvergence")
	flagFlannelAdds  = flag.Int("nodenet.flanneld.adds", 20, "single Nodes added one at a time afterwards, 250 ms apart (latency samples)")
)

// flannelResult is one run of the convergence scenario for one backend.
type flannelResult struct {
	Peers    int
	Create   time.Duration // first create → last create returned
	All      time.Duration // first create → every route (and neighbour, FDB entry) in the kernel
	AfterAPI time.Duration // last create returned → all programmed
	One      Latency       // single Node created → its route in the kernel
}

func (r flannelResult) String() string {
	return fmt.Sprintf("%d peers: created in %v, all programmed %v after the first create (%v after the last); one more node → route: %v",
		r.Peers, r.Create.Round(time.Millisecond), r.All.Round(time.Millisecond), r.AfterAPI.Round(time.Millisecond), r.One)
}

// BenchmarkFlanneldConvergence: one flanneld (in-process, its kernel side
// in a throwaway node namespace, the CLI's default --min-sync-period of
// 100 ms) and an in-process API server. -nodenet.flanneld.peers Node
// objects (podCIDR + flannel annotations, no daemons behind them) are
// created at once by -nodenet.workers clients; measured is the wall time
// from the first create until the node namespace holds a route for every
// peer, and for vxlan a permanent neighbour and an FDB entry too (polled
// every 5 ms through netlink). Then -nodenet.flanneld.adds single Nodes are
// added one at a time: create returned → route in the kernel. Run with
// -benchtime=1x. The single adds are 250 ms apart, so each finds the
// daemon idle (past its rate limit) as a node joining a settled cluster
// does.
func BenchmarkFlanneldConvergence(b *testing.B) {
	nettest.RequirePrivileged(b)
	sc := scaleFor(b)
	peers, adds := *flagFlannelPeers, *flagFlannelAdds
	if !flagSet("nodenet.flanneld.peers") {
		peers = max(10, int(math.Round(float64(peers)*sc.Factor)))
	}
	for _, backend := range []string{"host-gw", "vxlan"} {
		b.Run(backend, func(b *testing.B) {
			var res flannelResult
			for i := 0; i < b.N; i++ {
				res = runFlanneldConvergence(b, backend, peers, adds, sc.Workers)
			}
			b.Logf("%s: %v", backend, res)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(res.All.Seconds(), "converge-all-s")
			b.ReportMetric(res.AfterAPI.Seconds(), "after-last-create-s")
			b.ReportMetric(res.Create.Seconds(), "create-s")
			b.ReportMetric(Ms(res.One.P50), "one-node-p50-ms")
			b.ReportMetric(Ms(res.One.Max), "one-node-max-ms")
		})
	}
}

func runFlanneldConvergence(b *testing.B, backend string, peers, adds, workers int) flannelResult {
	b.StopTimer()
	ns, far := nettest.New(b), nettest.New(b)
	nettest.Link(b, ns, "eth0", "192.168.0.1/16", far, "eth0", "192.168.255.254/16")
	srv := testapi.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := b.TempDir()
	conf := filepath.Join(dir, "net-conf.json")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `{"Network":"10.0.0.0/8","Backend":{"Type":%q}}`, backend), 0o644); err != nil {
		b.Fatal(err)
	}
	if _, err := srv.Client.CoreV1().Nodes().Create(ctx, benchNode("self", 0, backend), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	d, err := flanneld.New(flanneld.Options{
		NodeName: "self", Client: kubernetes.NewForConfigOrDie(srv.Config), Netns: flanneld.Netns(ns.Name()),
		NetConfPath: conf, Iface: flanneld.IfaceOptions{Ifaces: []string{"eth0"}}, SubnetFile: filepath.Join(dir, "subnet.env"),
		ResyncPeriod: 10 * time.Second, MinSyncPeriod: 100 * time.Millisecond, Logger: testapi.Logger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()
	defer func() { stop(); <-done }()
	for ok, _ := d.Ready(); !ok; ok, _ = d.Ready() {
		time.Sleep(10 * time.Millisecond)
	}
	count := kernelCounter(b, ns, backend)

	b.StartTimer()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if _, err := srv.Client.CoreV1().Nodes().Create(ctx, benchNode(fmt.Sprintf("peer-%05d", i), i, backend), metav1.CreateOptions{}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := 1; i <= peers; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	created := time.Now()
	for count() < peers {
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("only %d of %d peers programmed after 5 minutes", count(), peers)
		}
		time.Sleep(5 * time.Millisecond)
	}
	all := time.Now()
	b.StopTimer()

	h, err := ns.Handle(), error(nil)
	var one []time.Duration
	for j := 1; j <= adds; j++ {
		// A node joins a settled cluster: past the rate limit of the last
		// sync, as in life (a burst is the scenario above).
		time.Sleep(250 * time.Millisecond)
		i := peers + j
		n := benchNode(fmt.Sprintf("peer-%05d", i), i, backend)
		if _, err = srv.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		dst := netip.MustParsePrefix(n.Spec.PodCIDR)
		for !hasRoute(h, dst) {
			if time.Since(t0) > time.Minute {
				b.Fatalf("route to %s not programmed after a minute", dst)
			}
			time.Sleep(time.Millisecond)
		}
		one = append(one, time.Since(t0))
	}
	return flannelResult{Peers: peers, Create: created.Sub(start), All: all.Sub(start), AfterAPI: all.Sub(created), One: Summarize(one)}
}

// benchNode is peer i as a flanneld node publishes itself: podCIDR
// 10.x.y.0/24, public IP on the node network, vxlan backend data.
func benchNode(name string, i int, backend string) *corev1.Node {
	cidr := fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
	data := "null"
	if backend == "vxlan" {
		data = fmt.Sprintf(`{"VNI":1,"VtepMAC":"02:00:00:%02x:%02x:%02x"}`, i>>16&0xff, i>>8&0xff, i&0xff)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			flanneld.AnnKubeSubnetManager: "true", flanneld.AnnBackendType: backend, flanneld.AnnBackendData: data,
			flanneld.AnnPublicIP: fmt.Sprintf("192.168.%d.%d", 1+i/250, 1+i%250),
		}},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
	}
}

// kernelCounter returns how many peers are fully programmed: routes, and
// for vxlan the smaller of routes, neighbours and FDB entries.
func kernelCounter(b *testing.B, ns *nettest.NS, backend string) func() int {
	tbl, err := routes.NewNetlinkTable(ns.Name(), 0, routes.ProtocolNodenet)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tbl.Close)
	var nt *routes.NeighTable
	var ft *routes.FDBTable
	if backend == "vxlan" {
		if nt, err = routes.NewNeighTable(ns.Name(), "flannel.1"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nt.Close)
		if ft, err = routes.NewFDBTable(ns.Name(), "flannel.1"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(ft.Close)
	}
	return func() int {
		ctx := context.Background()
		rs, err := tbl.List(ctx)
		if err != nil {
			b.Fatal(err)
		}
		n := len(rs)
		if nt != nil {
			ne, err1 := nt.List(ctx)
			fe, err2 := ft.List(ctx)
			if err1 != nil || err2 != nil {
				b.Fatal(err1, err2)
			}
			n = min(n, len(ne), len(fe))
		}
		return n
	}
}

func hasRoute(h *netlink.Handle, dst netip.Prefix) bool {
	_, ipn, _ := netParseCIDR(dst)
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: ipn}, netlink.RT_FILTER_DST)
	return err == nil && len(rs) > 0
}

func netParseCIDR(p netip.Prefix) (netip.Addr, *net.IPNet, error) {
	_, n, err := net.ParseCIDR(p.String())
	return p.Addr(), n, err
}
