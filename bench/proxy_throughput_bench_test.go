package bench

import (
	"context"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/ebpf"
	"github.com/nodenet/nodenet/proxy/nftables"
)

// BenchmarkProxyThroughput: iperf3 through a ClusterIP as a share of the
// same transfer straight to the endpoint, on the proxy benchmarks'
// topology (client namespace → node → backend), once per data plane:
// `ebpf` translates in the client's connect (socket-level load balancing;
// the programs sit on a throwaway cgroup holding this process and so its
// iperf3 children), so its packets are the direct ones; `nftables` DNATs
// every packet in the node, through conntrack. Three rounds each,
// alternating direct and via the ClusterIP; reports the median share
// (`tput-share`) and the median Gbit/s of both.
func BenchmarkProxyThroughput(b *testing.B) {
	nettest.RequirePrivileged(b)
	nettest.RequireTool(b, "iperf3")
	planes := []struct {
		name string
		dp   func(b *testing.B, topo *proxyBenchTopology) proxy.DataPlane
	}{
		{"ebpf", func(b *testing.B, _ *proxyBenchTopology) proxy.DataPlane {
			cfg := ebpf.Config{Family: proxy.IPv4, Cgroup: nettest.Cgroup(b), PinDir: filepath.Join(nettest.BPFFS(b), "ipv4")}
			b.Cleanup(func() {
				if err := ebpf.New(cfg).Cleanup(context.Background()); err != nil {
					b.Error(err)
				}
			})
			return ebpf.New(cfg)
		}},
		{"nftables", func(b *testing.B, topo *proxyBenchTopology) proxy.DataPlane {
			runner := &nftables.ExecRunner{Netns: topo.node.Name()}
			b.Cleanup(func() { runner.Close() })
			return nftables.New(proxy.IPv4, runner, nil)
		}},
	}
	for _, pl := range planes {
		b.Run(pl.name, func(b *testing.B) {
			for range b.N {
				runProxyThroughput(b, pl.name, pl.dp)
			}
		})
	}
}

func runProxyThroughput(b *testing.B, name string, newDP func(*testing.B, *proxyBenchTopology) proxy.DataPlane) {
	topo := newProxyBenchTopology(b)
	backend := addrN(benchEPBase, 1)
	vip := netip.AddrPortFrom(addrN(benchVIPBase, 1), 80)
	p, err := proxy.New(proxy.Config{NodeName: "bench-node", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		map[proxy.Family]proxy.DataPlane{proxy.IPv4: newDP(b, topo)})
	if err != nil {
		b.Fatal(err)
	}
	p.Tracker().SetService(benchService(0))
	port, proto, pname, node := int32(tputPort), corev1.ProtocolTCP, "http", "elsewhere"
	p.Tracker().SetEndpointSlice(&discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "svc-00000-a", ResourceVersion: "1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "svc-00000"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{backend.String()}, NodeName: &node}},
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	})
	if err := p.SyncNow(context.Background(), true); err != nil {
		b.Fatal(err)
	}
	var direct, via, share []float64
	for range 3 {
		d, _ := tputIperf3(b, topo.client, topo.backend, backend)
		v, _ := tputIperf3Via(b, topo.client, topo.backend, backend, vip)
		direct, via, share = append(direct, d), append(via, v), append(share, v/d)
	}
	med := func(x []float64) float64 { x = slices.Clone(x); slices.Sort(x); return x[len(x)/2] }
	b.ReportMetric(med(share), "tput-share")
	b.ReportMetric(med(direct), "direct-gbps")
	b.ReportMetric(med(via), "clusterip-gbps")
	b.Logf("%s: pod → ClusterIP → pod %.2f Gbit/s, direct %.2f Gbit/s: %.0f %% (median of 3; shares %.2f)",
		name, med(via), med(direct), 100*med(share), share)
}
