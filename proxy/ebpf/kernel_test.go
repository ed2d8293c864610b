package ebpf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	v1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

const wait = 10 * time.Second

func clusterIP(svc *v1.Service) string {
	return net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port))
}

// kernelEnv is proxytest's topology (client, node, two pods, API server,
// dual-stack proxy core) with this data plane attached to a throwaway
// cgroup that holds the test process.
type kernelEnv struct {
	*proxytest.Env
	cgroup, pins string
}

func newKernelEnv(t *testing.T) *kernelEnv {
	nettest.RequirePrivileged(t)
	nettest.SkipShort(t, "the real-kernel socket-LB suite")
	k := &kernelEnv{}
	k.Env = proxytest.NewEnv(t, func(t testing.TB, _ *nettest.NS, f proxy.Family) proxy.DataPlane {
		return k.dataPlane(f)
	})
	k.pins = nettest.BPFFS(t)
	k.cgroup = nettest.Cgroup(t)
	t.Cleanup(func() {
		for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
			if err := k.dataPlane(f).Cleanup(context.Background()); err != nil {
				t.Errorf("cleanup %s: %v", f, err)
			}
		}
	})
	return k
}

func (k *kernelEnv) dataPlane(f proxy.Family) *DataPlane {
	return New(Config{Family: f, Cgroup: k.cgroup, PinDir: filepath.Join(k.pins, familyDir(f)), Log: testapi.Logger(),
		NetNS: k.Node.Path()})
}

// dial connects from the client namespace and reads who answered.
func (k *kernelEnv) dial(addr string) (proxytest.Reply, error) {
	return proxytest.DialTCP(k.Client, addr, time.Second)
}

func (k *kernelEnv) backends(addr string, n int) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		r, err := k.dial(addr)
		if err != nil {
			return seen, err
		}
		seen[r.Backend]++
	}
	return seen, nil
}

// TestKernelSocketLB runs the socket-LB requirements against the real
// kernel: the client namespace's sockets belong to the test process, which
// sits in the cgroup the programs are attached to.
func TestKernelSocketLB(t *testing.T) {
	k := newKernelEnv(t)
	p := k.StartProxy(t)
	for _, c := range []struct {
		name string
		run  func(*testing.T, *kernelEnv)
	}{
		{"ClusterIPReachesBothEndpoints", clusterIPReachesBothEndpoints},
		{"IPv6ClusterIPReachesBothEndpoints", ipv6ClusterIPReachesBothEndpoints},
		{"DualStackServiceAnswersPerFamily", dualStackServiceAnswersPerFamily},
		{"PodReachesItselfThroughItsService", podReachesItselfThroughItsService},
		{"PeerIsTheServiceAddress", peerIsTheServiceAddress},
		{"UnconnectedUDPRepliesComeFromTheVIP", unconnectedUDPRepliesComeFromTheVIP},
		{"NoEndpointsIsRefusedImmediately", noEndpointsIsRefusedImmediately},
		{"SessionAffinitySticks", sessionAffinitySticks},
		{"RemovedEndpointGetsNoNewConnections", removedEndpointGetsNoNewConnections},
		{"MapOccupancyMetrics", func(t *testing.T, k *kernelEnv) { mapOccupancyMetrics(t, p) }},
		{"RestartKeepsServing", restartKeepsServing},
		{"CleanupLeavesNothing", cleanupLeavesNothing},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, k) })
	}
}

func clusterIPReachesBothEndpoints(t *testing.T, k *kernelEnv) {
	svc := k.CreateService(t, proxytest.Service("web", v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1, proxytest.Pod2)
	k.waitBoth(t, clusterIP(svc))
}

func (k *kernelEnv) waitBoth(t *testing.T, addr string) {
	t.Helper()
	proxytest.Eventually(t, wait, "both endpoints behind "+addr, func() error {
		seen, err := k.backends(addr, 20)
		if err == nil && (seen["pod1"] == 0 || seen["pod2"] == 0) {
			err = fmt.Errorf("answers %v", seen)
		}
		return err
	})
}

func ipv6ClusterIPReachesBothEndpoints(t *testing.T, k *kernelEnv) {
	spec := proxytest.Service("web6", v1.ProtocolTCP, proxytest.TCPPort)
	spec.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
	svc := k.CreateService(t, spec)
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1v6, proxytest.Pod2v6)
	k.waitBoth(t, clusterIP(svc))
}

// dualStackServiceAnswersPerFamily: each family's ClusterIP of one Service
// is translated by that family's programs from that family's slice.
func dualStackServiceAnswersPerFamily(t *testing.T, k *kernelEnv) {
	spec := proxytest.Service("dual", v1.ProtocolTCP, proxytest.TCPPort)
	policy := v1.IPFamilyPolicyRequireDualStack
	spec.Spec.IPFamilyPolicy = &policy
	svc := k.CreateService(t, spec)
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("clusterIPs %v", svc.Spec.ClusterIPs)
	}
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1)
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod2v6)
	for i, want := range []string{"pod1", "pod2"} {
		addr := net.JoinHostPort(svc.Spec.ClusterIPs[i], fmt.Sprint(proxytest.TCPPort))
		proxytest.Eventually(t, wait, want+" behind "+addr, func() error {
			r, err := k.dial(addr)
			if err == nil && r.Backend != want {
				err = fmt.Errorf("answered by %s", r.Backend)
			}
			return err
		})
	}
}

// podReachesItselfThroughItsService: the socket is translated to the pod's
// own address, so no hairpin NAT is needed at all.
func podReachesItselfThroughItsService(t *testing.T, k *kernelEnv) {
	svc := k.CreateService(t, proxytest.Service("hairpin", v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1)
	proxytest.Eventually(t, wait, "pod1 through its own service", func() error {
		r, err := proxytest.DialTCP(k.Pod1, clusterIP(svc), time.Second)
		if err == nil && (r.Backend != "pod1" || !strings.HasPrefix(r.Peer, proxytest.Pod1IP+":")) {
			err = fmt.Errorf("answered by %s, which saw %s", r.Backend, r.Peer)
		}
		return err
	})
}

// peerIsTheServiceAddress: getpeername on a translated TCP socket shows the
// ClusterIP the application dialled (Go's net.Dial reads it back into
// RemoteAddr), while the backend sees the client's own address.
func peerIsTheServiceAddress(t *testing.T, k *kernelEnv) {
	svc := k.CreateService(t, proxytest.Service("peer", v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1)
	proxytest.Eventually(t, wait, "getpeername of a connection to "+clusterIP(svc), func() error {
		var c net.Conn
		if err := k.Client.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp", clusterIP(svc), time.Second)
			return err
		}); err != nil {
			return err
		}
		defer c.Close()
		if got := c.RemoteAddr().String(); got != clusterIP(svc) {
			return fmt.Errorf("peer %s, want %s", got, clusterIP(svc))
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if want := "pod1 " + proxytest.ClientIP + ":"; !strings.HasPrefix(string(buf[:n]), want) {
			return fmt.Errorf("greeting %q, want %q…", buf[:n], want)
		}
		return nil
	})
}

// unconnectedUDPRepliesComeFromTheVIP: sendto the ClusterIP goes to a
// backend (sendmsg4) and recvfrom reports the ClusterIP as the source
// (recvmsg4), as DNS clients that check the reply's source require.
func unconnectedUDPRepliesComeFromTheVIP(t *testing.T, k *kernelEnv) {
	svc := k.CreateService(t, proxytest.Service("dns", v1.ProtocolUDP, proxytest.UDPPort))
	k.SetEndpoints(t, svc, proxytest.UDPPort, proxytest.Pod1, proxytest.Pod2)
	var pc net.PacketConn
	if err := k.Client.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp4", ":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	to, err := net.ResolveUDPAddr("udp4", clusterIP(svc))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	proxytest.Eventually(t, wait, "UDP answers from both pods via "+clusterIP(svc), func() error {
		if _, err := pc.WriteTo([]byte("hi"), to); err != nil {
			return err
		}
		_ = pc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 1500)
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		if from.String() != clusterIP(svc) {
			t.Fatalf("reply from %s, want the ClusterIP %s", from, clusterIP(svc))
		}
		seen[strings.Fields(string(buf[:n]))[0]] = true
		if !seen["pod1"] || !seen["pod2"] {
			return fmt.Errorf("answered by %v so far", seen)
		}
		return nil
	})
}

func noEndpointsIsRefusedImmediately(t *testing.T, k *kernelEnv) {
	svc := k.CreateService(t, proxytest.Service("empty", v1.ProtocolTCP, proxytest.TCPPort))
	proxytest.Eventually(t, wait, "connection refused at "+clusterIP(svc), func() error {
		start := time.Now()
		_, err := proxytest.DialTCP(k.Client, clusterIP(svc), time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("dial: %v", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			return fmt.Errorf("refusal took %v", d)
		}
		return nil
	})
	udp := k.CreateService(t, proxytest.Service("empty-udp", v1.ProtocolUDP, proxytest.UDPPort))
	proxytest.Eventually(t, wait, "UDP send refused at "+clusterIP(udp), func() error {
		return k.Client.Do(func() error {
			pc, err := net.ListenPacket("udp4", ":0")
			if err != nil {
				return err
			}
			defer pc.Close()
			to, _ := net.ResolveUDPAddr("udp4", clusterIP(udp))
			if _, err := pc.WriteTo([]byte("hi"), to); !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("sendto: %v", err)
			}
			return nil
		})
	})
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1)
	proxytest.Eventually(t, wait, "service with new endpoints", func() error {
		_, err := k.dial(clusterIP(svc))
		return err
	})
}

func sessionAffinitySticks(t *testing.T, k *kernelEnv) {
	spec := proxytest.Service("sticky", v1.ProtocolTCP, proxytest.TCPPort)
	spec.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	timeout := int32(60)
	spec.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}}
	svc := k.CreateService(t, spec)
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1, proxytest.Pod2)
	var first string
	proxytest.Eventually(t, wait, "sticky service", func() error {
		seen, err := k.backends(clusterIP(svc), 20)
		if err != nil {
			return err
		}
		if len(seen) != 1 {
			return fmt.Errorf("answers spread over %v", seen)
		}
		for b := range seen {
			first = b
		}
		return nil
	})
	// Another namespace (another pod) is another client: it picks on its
	// own, and the first client still sticks.
	for range 20 {
		if _, err := proxytest.DialTCP(k.Pod2, clusterIP(svc), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	seen, err := k.backends(clusterIP(svc), 10)
	if err != nil || len(seen) != 1 || seen[first] != 10 {
		t.Fatalf("after another client: %v %v, want all %s", seen, err, first)
	}
}

func removedEndpointGetsNoNewConnections(t *testing.T, k *kernelEnv) {
	svc := k.CreateService(t, proxytest.Service("shrink", v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1, proxytest.Pod2)
	k.waitBoth(t, clusterIP(svc))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod2)
	proxytest.Eventually(t, wait, "only pod2 behind "+clusterIP(svc), func() error {
		seen, err := k.backends(clusterIP(svc), 20)
		if err == nil && seen["pod2"] != 20 {
			err = fmt.Errorf("answers %v", seen)
		}
		return err
	})
}

// linkInfos reads the pinned links of family f.
func (k *kernelEnv) linkInfos(t *testing.T, f proxy.Family) map[string]link.Info {
	t.Helper()
	return pinnedLinks(t, k.dataPlane(f))
}

// pinnedLinks reads dp's pinned cgroup links, by program.
func pinnedLinks(t *testing.T, dp *DataPlane) map[string]link.Info {
	t.Helper()
	f := dp.cfg.Family
	out := map[string]link.Info{}
	for _, h := range hooks[f] {
		l, err := link.LoadPinnedLink(dp.linkPin(h.prog), nil)
		if err != nil {
			t.Fatalf("open pinned link of %s: %v", h.prog, err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[h.prog] = *info
	}
	return out
}

// restartKeepsServing stops the proxy and starts a new one (new programs,
// the same pinned maps and links) while a client keeps connecting: no
// connect may fail, an established connection keeps working, and the links
// are the same kernel objects, only pointing at the new programs.
func restartKeepsServing(t *testing.T, k *kernelEnv) {
	svc := k.CreateService(t, proxytest.Service("restart", v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1, proxytest.Pod2)
	k.waitBoth(t, clusterIP(svc))
	before := k.linkInfos(t, proxy.IPv4)
	var conn net.Conn
	if err := k.Client.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", clusterIP(svc), time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	greeting := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := greeting.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	stop, done := make(chan struct{}), make(chan struct{})
	var dials, failures atomic.Int64
	var lastErr atomic.Value
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			dials.Add(1)
			if _, err := k.dial(clusterIP(svc)); err != nil {
				failures.Add(1)
				lastErr.Store(fmt.Errorf("%s: %w", time.Now().Format("15:04:05.000"), err))
			}
		}
	}()
	k.StopProxy()
	time.Sleep(200 * time.Millisecond)
	p := k.StartProxy(t)
	waitSynced(t, p)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	<-done
	if n := failures.Load(); n > 0 || dials.Load() < 10 {
		t.Fatalf("%d of %d connects failed across the restart (last: %v)", n, dials.Load(), lastErr.Load())
	}
	t.Logf("%d connects across the restart, none failed", dials.Load())
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if echo, err := greeting.ReadString('\n'); err != nil || echo != "ping\n" {
		t.Fatalf("established connection after restart: %q %v", echo, err)
	}
	after := k.linkInfos(t, proxy.IPv4)
	for prog, b := range before {
		a := after[prog]
		if a.ID != b.ID {
			t.Errorf("%s: link %d replaced by %d: it was detached", prog, b.ID, a.ID)
		}
		if a.Program == b.Program {
			t.Errorf("%s: link still runs program %d: the new process did not take over", prog, b.Program)
		}
	}
}

// cleanupLeavesNothing: after Cleanup no pin, no attached program, and the
// ClusterIP is no longer translated.
func cleanupLeavesNothing(t *testing.T, k *kernelEnv) {
	svc := k.CreateService(t, proxytest.Service("gone", v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1)
	proxytest.Eventually(t, wait, "service before cleanup", func() error {
		_, err := k.dial(clusterIP(svc))
		return err
	})
	k.StopProxy()
	for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		dp := k.dataPlane(f)
		if err := dp.Cleanup(context.Background()); err != nil {
			t.Fatalf("cleanup %s: %v", f, err)
		}
		if _, err := os.Stat(dp.PinDir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s pin directory still there: %v", f, err)
		}
	}
	cg, err := os.Open(k.cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		for _, h := range hooks[f] {
			res, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: h.attach})
			if err != nil {
				t.Fatalf("query %s programs: %v", h.attach, err)
			}
			if len(res.Programs) != 0 {
				t.Errorf("%d programs still attached as %s", len(res.Programs), h.attach)
			}
		}
	}
	if r, err := proxytest.DialTCP(k.Client, clusterIP(svc), 300*time.Millisecond); err == nil {
		t.Errorf("ClusterIP still answered by %s after cleanup", r.Backend)
	}
}

// mapOccupancyMetrics: the proxy's registry serves each family's map sizes
// once synced: the services and backends maps hold what the cases above
// programmed, the capacities are the C programs' max_entries.
func mapOccupancyMetrics(t *testing.T, p *proxy.Proxy) {
	mfs, err := p.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, m := range []string{socklbMapServices, socklbMapBackends} {
			if n := got["nodenet_proxy_ebpf_map_entries ip_family="+fam+" map="+m]; n < 1 {
				t.Errorf("%s %s map entries = %v, want some", fam, m, n)
			}
		}
		if n := got["nodenet_proxy_ebpf_map_max_entries ip_family="+fam+" map="+socklbMapServices]; n != 65536 {
			t.Errorf("%s services max entries = %v, want 65536", fam, n)
		}
		if _, ok := got["nodenet_proxy_ebpf_skipped_entries_total ip_family="+fam+" reason=map_full"]; !ok {
			t.Errorf("%s: no skipped entries counter", fam)
		}
	}
}
