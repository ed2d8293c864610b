package ebpf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// tcEnv is proxytest's topology with the tc program on the node's
// client-facing veth (c0) and the socket programs on an empty cgroup: the
// client namespace's sockets are not in it, so everything the client sends
// reaches the node as packets, as traffic from another host does. pod1 is
// the node's own pod, pod2 stands for a pod on another node.
type tcEnv struct {
	*proxytest.Env
	cgroup, pins string
	ifaces       []string // the tc program's interfaces: c0 unless told
}

func newTCEnv(t *testing.T, ifaces ...string) *tcEnv {
	nettest.RequirePrivileged(t)
	nettest.SkipShort(t, "the real-kernel tc suite")
	nettest.RequireTool(t, "nft")
	if len(ifaces) == 0 {
		ifaces = []string{"c0"}
	}
	k := &tcEnv{ifaces: ifaces}
	k.Env = proxytest.NewEnv(t, func(t testing.TB, _ *nettest.NS, f proxy.Family) proxy.DataPlane {
		return k.dataPlane(f)
	})
	k.pins = nettest.BPFFS(t)
	k.cgroup = nettest.EmptyCgroup(t)
	t.Cleanup(func() {
		k.StopProxy()
		for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
			if err := k.dataPlane(f).Cleanup(context.Background()); err != nil {
				t.Errorf("cleanup %s: %v", f, err)
			}
		}
	})
	return k
}

func (k *tcEnv) dataPlane(f proxy.Family) *DataPlane {
	return New(Config{Family: f, Cgroup: k.cgroup, PinDir: filepath.Join(k.pins, familyDir(f)), Log: testapi.Logger(),
		Interfaces: k.ifaces, NetNS: k.Node.Path()})
}

// TestKernelTC runs the tc path's requirements against the real kernel.
func TestKernelTC(t *testing.T) {
	k := newTCEnv(t)
	k.StartProxy(t)
	for _, c := range []struct {
		name string
		run  func(*testing.T, *tcEnv)
	}{
		{"NodePortToRemoteBackendIsSNATed", nodePortToRemoteBackendIsSNATed},
		{"NodePortETPLocalKeepsTheClient", nodePortETPLocalKeepsTheClient},
		{"ExternalIPAndLoadBalancerIP", externalIPAndLoadBalancerIP},
		{"UDPNodePort", udpNodePort},
		{"NoEndpointsIsRefused", tcNoEndpointsIsRefused},
		{"LoadBalancerSourceRanges", loadBalancerSourceRanges},
		{"SessionAffinityByClient", sessionAffinityByClient},
		{"EndpointChangeMovesNewConnections", endpointChangeMovesNewConnections},
		{"IPv6NodePort", ipv6NodePort},
		{"RestartKeepsEstablishedConnections", tcRestartKeepsEstablished},
		{"CleanupLeavesNothing", tcCleanupLeavesNothing},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, k) })
	}
}

// TestTCPodReachesETPLocalElsewhere: with the tc program on the client's
// and pod1's veths, pod1 (a source in the cluster CIDRs) reaches an
// eTP=Local Service whose only endpoint is on another node through the LB
// IP and the NodePort, keeping its address (the inside entry,
// kubernetes#71596), while the client, another host, is refused at once.
// The shared suite's ExternalTrafficPolicyLocalFromInside also has the
// node itself connect, which is socket LB's (nodeOwnTrafficIsSocketLB).
func TestTCPodReachesETPLocalElsewhere(t *testing.T) {
	k := newTCEnv(t, "c0", "p1")
	k.StartProxy(t)
	for _, c := range []struct {
		family         v1.IPFamily
		lb, node, pod1 string
		remote         proxytest.Backend
	}{
		{v1.IPv4Protocol, proxytest.LBIP, proxytest.NodeIP, proxytest.Pod1IP, proxytest.Pod2},
		{v1.IPv6Protocol, proxytest.LBIP6, proxytest.NodeIP6, proxytest.Pod1IP6, proxytest.Pod2v6},
	} {
		t.Run(string(c.family), func(t *testing.T) {
			spec := proxytest.Service("local-inside-"+strings.ToLower(string(c.family)), v1.ProtocolTCP, proxytest.TCPPort)
			spec.Spec.Type = v1.ServiceTypeLoadBalancer
			spec.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			policy := v1.IPFamilyPolicySingleStack
			spec.Spec.IPFamilyPolicy = &policy
			spec.Spec.IPFamilies = []v1.IPFamily{c.family}
			svc := k.setLBIngressTo(t, k.CreateService(t, spec), c.lb)
			k.SetEndpoints(t, svc, proxytest.TCPPort, c.remote) // none on this node
			for _, addr := range []string{net.JoinHostPort(c.lb, fmt.Sprint(proxytest.TCPPort)), nodePortOf(c.node, svc)} {
				proxytest.Eventually(t, wait, "pod1 reaching the remote endpoint at "+addr, func() error {
					r, err := proxytest.DialTCP(k.Pod1, addr, time.Second)
					if err != nil {
						return err
					}
					if host, _, _ := net.SplitHostPort(r.Peer); r.Backend != "pod2" || host != c.pod1 {
						return fmt.Errorf("answered by %s seeing %s, want pod2 seeing %s", r.Backend, r.Peer, c.pod1)
					}
					return nil
				})
				start := time.Now()
				if _, err := proxytest.DialTCP(k.Client, addr, 3*time.Second); !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
					t.Errorf("client to %s: %v after %v, want refused at once", addr, err, time.Since(start))
				}
			}
		})
	}
}

func nodePortOf(host string, svc *v1.Service) string {
	return net.JoinHostPort(host, fmt.Sprint(svc.Spec.Ports[0].NodePort))
}

func nodePortService(name string, proto v1.Protocol, port int32) *v1.Service {
	svc := proxytest.Service(name, proto, port)
	svc.Spec.Type = v1.ServiceTypeNodePort
	return svc
}

// answeredBy dials addr from the client and checks who answered and which
// source address the backend saw.
func (k *tcEnv) answeredBy(addr, backend, peer string) error {
	r, err := proxytest.DialTCP(k.Client, addr, time.Second)
	if err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(r.Peer)
	if r.Backend != backend || host != peer {
		return fmt.Errorf("answered by %s seeing %s, want %s seeing %s", r.Backend, r.Peer, backend, peer)
	}
	return nil
}

func nodePortToRemoteBackendIsSNATed(t *testing.T, k *tcEnv) {
	svc := k.CreateService(t, nodePortService("np-remote", v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod2)
	addr := nodePortOf(proxytest.NodeIP, svc)
	// The backend sees the node's address toward it (p2's, the route's
	// preferred source, as MASQUERADE picks it), not the address the
	// request came in to: its reply comes back through the node the way
	// the request left, which on an overlay (flannel.1) is what the
	// backend's node's strict reverse-path filter accepts.
	proxytest.Eventually(t, wait, "NodePort "+addr, func() error { return k.answeredBy(addr, "pod2", proxytest.Pod2GatewayIP) })
}

func nodePortETPLocalKeepsTheClient(t *testing.T, k *tcEnv) {
	spec := nodePortService("np-local", v1.ProtocolTCP, proxytest.TCPPort)
	spec.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc := k.CreateService(t, spec)
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1, proxytest.Pod2)
	addr := nodePortOf(proxytest.NodeIP, svc)
	proxytest.Eventually(t, wait, "eTP Local NodePort "+addr, func() error {
		for range 10 {
			if err := k.answeredBy(addr, "pod1", proxytest.ClientIP); err != nil {
				return err
			}
		}
		return nil
	})
}

const externalIP = "192.168.70.5"

func externalIPAndLoadBalancerIP(t *testing.T, k *tcEnv) {
	spec := proxytest.Service("lb", v1.ProtocolTCP, proxytest.TCPPort)
	spec.Spec.Type = v1.ServiceTypeLoadBalancer
	spec.Spec.ExternalIPs = []string{externalIP}
	svc := k.setLBIngress(t, k.CreateService(t, spec))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod2)
	for _, host := range []string{externalIP, proxytest.LBIP} {
		addr := net.JoinHostPort(host, fmt.Sprint(proxytest.TCPPort))
		proxytest.Eventually(t, wait, "entry point "+addr, func() error { return k.answeredBy(addr, "pod2", proxytest.Pod2GatewayIP) })
	}
}

func (k *tcEnv) setLBIngress(t *testing.T, svc *v1.Service) *v1.Service {
	t.Helper()
	return k.setLBIngressTo(t, svc, proxytest.LBIP)
}

func (k *tcEnv) setLBIngressTo(t *testing.T, svc *v1.Service, ip string) *v1.Service {
	t.Helper()
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
	svc, err := k.Kube.CoreV1().Services("default").UpdateStatus(t.Context(), svc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("set LB ingress: %v", err)
	}
	return svc
}

func udpNodePort(t *testing.T, k *tcEnv) {
	svc := k.CreateService(t, nodePortService("np-udp", v1.ProtocolUDP, proxytest.UDPPort))
	k.SetEndpoints(t, svc, proxytest.UDPPort, proxytest.Pod2)
	addr := nodePortOf(proxytest.NodeIP, svc)
	proxytest.Eventually(t, wait, "UDP NodePort "+addr, func() error {
		return udpAnsweredBy(func() (net.Conn, error) { return proxytest.DialUDP(k.Client, addr) }, "pod2", proxytest.Pod2GatewayIP)
	})
}

// udpAnsweredBy opens a UDP socket with dial, asks once and checks who
// answered and which source address the backend saw.
func udpAnsweredBy(dial func() (net.Conn, error), backend, peer string) error {
	c, err := dial()
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := proxytest.AskUDP(c, time.Second)
	if err != nil {
		return err
	}
	if host, _, _ := net.SplitHostPort(r.Peer); r.Backend != backend || host != peer {
		return fmt.Errorf("answered by %s seeing %s, want %s seeing %s", r.Backend, r.Peer, backend, peer)
	}
	return nil
}

// tcNoEndpointsIsRefused: a TCP reset and an ICMP port unreachable come
// back at once, as from a REJECT rule. The entry point is an external IP,
// which the node would otherwise forward (back to the client, whose default
// route is the node: a loop, not a refusal), so a refusal is the program's.
func tcNoEndpointsIsRefused(t *testing.T, k *tcEnv) {
	for _, c := range []struct {
		name, extIP string
		f           proxy.Family
		ipFamily    v1.IPFamily
	}{{"empty", "192.168.70.6", proxy.IPv4, v1.IPv4Protocol}, {"empty-v6", "fd00:70::6", proxy.IPv6, v1.IPv6Protocol}} {
		spec := proxytest.Service(c.name, v1.ProtocolTCP, proxytest.TCPPort)
		spec.Spec.Ports = append(spec.Spec.Ports, v1.ServicePort{Name: "u", Port: proxytest.UDPPort, Protocol: v1.ProtocolUDP,
			TargetPort: intstr.FromInt(proxytest.UDPPort)})
		policy := v1.IPFamilyPolicySingleStack
		spec.Spec.IPFamilyPolicy = &policy
		spec.Spec.IPFamilies = []v1.IPFamily{c.ipFamily}
		spec.Spec.ExternalIPs = []string{c.extIP}
		svc := k.CreateService(t, spec)
		tcp := net.JoinHostPort(c.extIP, fmt.Sprint(proxytest.TCPPort))
		udp := net.JoinHostPort(c.extIP, fmt.Sprint(proxytest.UDPPort))
		proxytest.Eventually(t, wait, "entry points programmed", func() error { return k.programmed(c.f, tcp, udp) })
		start := time.Now()
		_, err := proxytest.DialTCP(k.Client, tcp, 3*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
			t.Errorf("TCP dial %s after %v: %v, want refused at once", tcp, time.Since(start), err)
		}
		conn, err := proxytest.DialUDP(k.Client, udp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := proxytest.AskUDP(conn, 3*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("UDP %s: %v, want refused (port unreachable)", udp, err)
		}
		conn.Close()
		// An endpoint appearing later makes it work.
		backend := proxytest.Pod1
		if c.f == proxy.IPv6 {
			backend = proxytest.Pod1v6
		}
		k.SetEndpoints(t, svc, proxytest.TCPPort, backend)
		proxytest.Eventually(t, wait, "service with new endpoints", func() error {
			_, err := proxytest.DialTCP(k.Client, tcp, time.Second)
			return err
		})
	}
}

// sessionAffinityByClient: with ClientIP affinity a client's new flows
// keep going to one backend.
func sessionAffinityByClient(t *testing.T, k *tcEnv) {
	spec := nodePortService("np-sticky", v1.ProtocolTCP, proxytest.TCPPort)
	spec.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	svc := k.CreateService(t, spec)
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1, proxytest.Pod2)
	addr := nodePortOf(proxytest.NodeIP, svc)
	proxytest.Eventually(t, wait, "sticky NodePort "+addr, func() error {
		seen := map[string]int{}
		for range 20 {
			r, err := proxytest.DialTCP(k.Client, addr, time.Second)
			if err != nil {
				return err
			}
			seen[r.Backend]++
		}
		if len(seen) != 1 {
			return fmt.Errorf("answers spread over %v", seen)
		}
		return nil
	})
}

// programmed checks that the services map has every addr (TCP or UDP).
func (k *tcEnv) programmed(f proxy.Family, addrs ...string) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(k.pins, familyDir(f), socklbMapServices), nil)
	if err != nil {
		return err
	}
	defer m.Close()
	have := map[string]bool{}
	all, err := kernelTable[svcKey, svcValue]{m}.All()
	if err != nil {
		return err
	}
	for key := range all {
		have[netipAddrPort(key.Addr, key.Port, f).String()] = true
	}
	for _, a := range addrs {
		if !have[a] {
			return fmt.Errorf("%s not in the services map", a)
		}
	}
	return nil
}

func loadBalancerSourceRanges(t *testing.T, k *tcEnv) {
	spec := proxytest.Service("ranges", v1.ProtocolTCP, proxytest.TCPPort+1)
	spec.Spec.Type = v1.ServiceTypeLoadBalancer
	spec.Spec.LoadBalancerSourceRanges = []string{"10.99.0.0/16", proxytest.ClientIP + "/32"}
	svc := k.setLBIngress(t, k.CreateService(t, spec))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod2)
	addr := net.JoinHostPort(proxytest.LBIP, fmt.Sprint(proxytest.TCPPort+1))
	proxytest.Eventually(t, wait, "allowed source reaches "+addr, func() error { return k.answeredBy(addr, "pod2", proxytest.Pod2GatewayIP) })

	svc, err := k.Kube.CoreV1().Services("default").Get(t.Context(), svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.LoadBalancerSourceRanges = []string{"10.99.0.0/16"}
	if _, err := k.Kube.CoreV1().Services("default").Update(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Denied sources are dropped (as the iptables mode's DROP does): the
	// dial times out rather than being refused.
	proxytest.Eventually(t, wait, "source outside the ranges dropped at "+addr, func() error {
		_, err := proxytest.DialTCP(k.Client, addr, 300*time.Millisecond)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return fmt.Errorf("dial: %v, want a timeout", err)
		}
		return nil
	})
}

// endpointChangeMovesNewConnections: new connections go to the new
// endpoint; one established before the change keeps its backend.
func endpointChangeMovesNewConnections(t *testing.T, k *tcEnv) {
	svc := k.CreateService(t, nodePortService("np-move", v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1)
	addr := nodePortOf(proxytest.NodeIP, svc)
	proxytest.Eventually(t, wait, "first endpoint", func() error { return k.answeredBy(addr, "pod1", proxytest.Pod1GatewayIP) })
	conn := k.connect(t, addr)
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod2)
	proxytest.Eventually(t, wait, "new endpoint", func() error { return k.answeredBy(addr, "pod2", proxytest.Pod2GatewayIP) })
	echo(t, conn)
}

// connect opens a connection to addr from the client and reads the
// greeting.
func (k *tcEnv) connect(t *testing.T, addr string) net.Conn {
	t.Helper()
	return k.dialEcho(t, addr).conn
}

// echo checks that an established connection still carries data.
func echo(t *testing.T, conn net.Conn) {
	t.Helper()
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatalf("established connection: %v", err)
	}
	buf := make([]byte, 5)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("established connection: read %q, %v", buf, err)
	}
}

func ipv6NodePort(t *testing.T, k *tcEnv) {
	spec := nodePortService("np6", v1.ProtocolTCP, proxytest.TCPPort)
	policy := v1.IPFamilyPolicySingleStack
	spec.Spec.IPFamilyPolicy = &policy
	spec.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
	svc := k.CreateService(t, spec)
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod2v6)
	addr := nodePortOf(proxytest.NodeIP6, svc)
	proxytest.Eventually(t, wait, "IPv6 NodePort "+addr, func() error { return k.answeredBy(addr, "pod2", proxytest.Pod2GatewayIP6) })
}

// tcRestartKeepsEstablished: a new proxy process (new DataPlane on the same
// pins) re-points the pinned TCX link at its program: the link is never
// detached, established flows keep their conntrack entries, new ones work.
func tcRestartKeepsEstablished(t *testing.T, k *tcEnv) {
	svc := k.CreateService(t, nodePortService("np-restart", v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1, proxytest.Pod2)
	addr := nodePortOf(proxytest.NodeIP, svc)
	proxytest.Eventually(t, wait, "NodePort before restart", func() error {
		_, err := proxytest.DialTCP(k.Client, addr, time.Second)
		return err
	})
	conn := k.connect(t, addr)
	before := k.tcLinkID(t)
	k.StopProxy()
	p := k.StartProxy(t)
	waitSynced(t, p)
	if after := k.tcLinkID(t); after != before {
		t.Errorf("TCX link %d replaced by %d: the restart detached it", before, after)
	}
	echo(t, conn)
	if _, err := proxytest.DialTCP(k.Client, addr, time.Second); err != nil {
		t.Fatalf("new connection after restart: %v", err)
	}
}

func (k *tcEnv) tcLinkID(t *testing.T) link.ID {
	t.Helper()
	l, err := link.LoadPinnedLink(k.dataPlane(proxy.IPv4).tcLinkPin("c0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// tcCleanupLeavesNothing: no program on c0, no pin, no NAT-hook table.
func tcCleanupLeavesNothing(t *testing.T, k *tcEnv) {
	k.StopProxy()
	for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		if err := k.dataPlane(f).Cleanup(context.Background()); err != nil {
			t.Fatalf("cleanup %s: %v", f, err)
		}
		if _, err := os.Stat(filepath.Join(k.pins, familyDir(f))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s pin directory left: %v", f, err)
		}
	}
	err := k.Node.Do(func() error {
		c0, err := netlink.LinkByName("c0")
		if err != nil {
			return err
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: c0.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		if len(res.Programs) != 0 {
			return fmt.Errorf("%d programs still attached to c0", len(res.Programs))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if out := k.Node.MustExec(t, "nft", "list", "tables"); strings.Contains(string(out), "nodenet-ebpf") {
		t.Errorf("NAT-hook table left: %s", out)
	}
}
