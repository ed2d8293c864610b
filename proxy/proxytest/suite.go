package proxytest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
)

// EnvWait, a duration, replaces wait: vmtest sets it in its guest, where
// TCG emulation on a loaded machine makes a sync and a dial several times
// slower than on the host.
const EnvWait = "NODENET_TEST_WAIT"

// wait bounds how long the cases wait for the data plane to get a change
// into the kernel.
var wait = waitFromEnv(10 * time.Second)

func waitFromEnv(def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(EnvWait)); err == nil && d > 0 {
		return d
	}
	return def
}

func vip(svc *v1.Service) string {
	return net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port))
}

// answeredBy connects from ns to addr and checks which pod answered.
func answeredBy(ns *nettest.NS, addr, want string) error {
	r, err := DialTCP(ns, addr, time.Second)
	if err == nil && r.Backend != want {
		err = fmt.Errorf("answered by %s", r.Backend)
	}
	return err
}

// backends connects n times and returns who answered.
func backends(e *Env, addr string, n int) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		r, err := DialTCP(e.Client, addr, time.Second)
		if err != nil {
			return seen, err
		}
		seen[r.Backend]++
	}
	return seen, nil
}

// KernelSuite runs every data-plane requirement against the real kernel.
// It needs root (nettest gates it). The proxy runs dual-stack; the traffic
// cases run over IPv4 at the top level and again over IPv6 under "IPv6".
func KernelSuite(t *testing.T, newDP NewDataPlane) { KernelSuiteWaiting(t, newDP, nil) }

// KernelSuiteWaiting is KernelSuite for a data plane that is still being
// built: the traffic cases named in waiting ("Hairpin", "IPv6/Hairpin")
// skip with the reason given, which must say what they wait for. It exists
// so a data plane can run every case it passes before the last piece
// lands; the list only ever shrinks.
func KernelSuiteWaiting(t *testing.T, newDP NewDataPlane, waiting map[string]string) {
	nettest.SkipShort(t, "the real-kernel data-plane suite")
	for name := range waiting {
		base := strings.TrimPrefix(name, "IPv6/")
		if !slices.ContainsFunc(trafficCases, func(c trafficCase) bool { return c.name == base }) {
			t.Fatalf("waiting list names %q, which is no traffic case", name)
		}
	}
	e := NewEnv(t, newDP)
	p := e.StartProxy(t)
	runTrafficCases(t, e, ipv4Stack, "", waiting)
	t.Run("IPv6", func(t *testing.T) { runTrafficCases(t, e, ipv6Stack, "IPv6/", waiting) })
	t.Run("DualStackServiceAnswersPerFamily", func(t *testing.T) { dualStackServiceAnswersPerFamily(t, e) })
	t.Run("BadInputIsSkipped", func(t *testing.T) {
		bad := e.CreateService(t, Service("bad", v1.ProtocolTCP, TCPPort))
		e.SetEndpoints(t, bad, 0, Pod1) // port 0: accepted by the API, not programmable
		good := e.CreateService(t, Service("good", v1.ProtocolTCP, TCPPort))
		e.SetEndpoints(t, good, TCPPort, Pod2)
		Eventually(t, wait, "good service next to a bad one", func() error {
			_, err := DialTCP(e.Client, vip(good), time.Second)
			return err
		})
		if n := counterValue(t, p, "nodenet_proxy_invalid_input_total"); n < 1 {
			t.Errorf("invalid input metric = %v", n)
		}
		if _, err := DialTCP(e.Client, vip(bad), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("bad service (no usable endpoints) dial: %v, want refused", err)
		}
	})

	t.Run("RestartKeepsTraffic", func(t *testing.T) {
		svc := e.CreateService(t, Service("restart", v1.ProtocolTCP, TCPPort))
		e.SetEndpoints(t, svc, TCPPort, Pod1, Pod2)
		var conn net.Conn
		Eventually(t, wait, "connection before restart", func() error {
			return e.Client.Do(func() error {
				var err error
				conn, err = net.DialTimeout("tcp", vip(svc), time.Second)
				return err
			})
		})
		defer conn.Close()
		if _, err := readGreeting(conn, time.Second); err != nil {
			t.Fatal(err)
		}
		e.StopProxy()
		// Rules stay while no proxy runs.
		if _, err := DialTCP(e.Client, vip(svc), time.Second); err != nil {
			t.Fatalf("service down while the proxy is stopped: %v", err)
		}
		p = e.StartProxy(t)
		Eventually(t, wait, "first sync after restart", func() error {
			if p.Snapshot(proxy.IPv4) == nil {
				return errNotYet
			}
			return nil
		})
		// The established connection survived the restart's full sync.
		if _, err := conn.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Read(buf); err != nil || string(buf) != "ping\n" {
			t.Fatalf("established connection after restart: %q %v", buf, err)
		}
		if _, err := DialTCP(e.Client, vip(svc), time.Second); err != nil {
			t.Fatalf("new connection after restart: %v", err)
		}
	})

	t.Run("Metrics", func(t *testing.T) { checkRunningMetrics(t, e, p) })
}

type trafficCase struct {
	name string
	run  func(t *testing.T, e *Env, s stack)
}

// trafficCases are the checks every IP family must pass, in order.
var trafficCases = []trafficCase{
	{"ClusterIPReachesBothEndpoints", clusterIPReachesBothEndpoints},
	{"NodePortFromAnotherNamespace", nodePortFromAnotherNamespace},
	{"NoEndpointsIsRefusedImmediately", noEndpointsIsRefusedImmediately},
	{"SessionAffinitySticks", sessionAffinitySticks},
	{"ExternalTrafficPolicyLocal", externalTrafficPolicyLocal},
	{"ExternalTrafficPolicyLocalFromInside", externalTrafficPolicyLocalFromInside},
	{"RemovedUDPEndpointGetsNoMoreDatagrams", removedUDPEndpointGetsNoMoreDatagrams},
	{"RemovedDeadEndpointFreesItsClients", removedDeadEndpointFreesItsClients},
	{"Hairpin", hairpin},
	{"SNATedClientReusingPortsIsNotStalled", snatedClientReusingPortsIsNotStalled},
}

func runTrafficCases(t *testing.T, e *Env, s stack, prefix string, waiting map[string]string) {
	for _, c := range trafficCases {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := waiting[prefix+c.name]; ok {
				t.Skip("waiting: " + why)
			}
			c.run(t, e, s)
		})
	}
}

func clusterIPReachesBothEndpoints(t *testing.T, e *Env, s stack) {
	svc := s.create(t, e, s.service("web", v1.ProtocolTCP, TCPPort))
	e.SetEndpoints(t, svc, TCPPort, s.pod1, s.pod2)
	Eventually(t, wait, "both endpoints behind "+vip(svc), func() error {
		seen, err := backends(e, vip(svc), 20)
		if err != nil {
			return err
		}
		if seen["pod1"] == 0 || seen["pod2"] == 0 {
			return fmt.Errorf("answers %v", seen)
		}
		return nil
	})
}

func nodePortFromAnotherNamespace(t *testing.T, e *Env, s stack) {
	nodePortToPod2(t, e, s, "np", TCPPort)
}

// nodePortToPod2 creates a TCP NodePort Service named name with pod2 as its
// endpoint on port and waits until the client reaches pod2 through it;
// it returns the node's ip:nodePort.
func nodePortToPod2(t *testing.T, e *Env, s stack, name string, port int32) string {
	np := s.service(name, v1.ProtocolTCP, port)
	np.Spec.Type = v1.ServiceTypeNodePort
	svc := s.create(t, e, np)
	e.SetEndpoints(t, svc, port, s.pod2)
	addr := net.JoinHostPort(s.nodeIP, fmt.Sprint(svc.Spec.Ports[0].NodePort))
	Eventually(t, wait, "NodePort "+addr, func() error { return answeredBy(e.Client, addr, "pod2") })
	return addr
}

func noEndpointsIsRefusedImmediately(t *testing.T, e *Env, s stack) {
	svc := s.create(t, e, s.service("empty", v1.ProtocolTCP, TCPPort))
	Eventually(t, wait, "connection refused at "+vip(svc), func() error { return refusedAtOnce(e.Client, vip(svc)) })
	// Endpoints appearing later make it work.
	e.SetEndpoints(t, svc, TCPPort, s.pod1)
	Eventually(t, wait, "service with new endpoints", func() error {
		_, err := DialTCP(e.Client, vip(svc), time.Second)
		return err
	})
}

func sessionAffinitySticks(t *testing.T, e *Env, s stack) {
	sticky := s.service("sticky", v1.ProtocolTCP, TCPPort)
	sticky.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	timeout := int32(60)
	sticky.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}}
	svc := s.create(t, e, sticky)
	e.SetEndpoints(t, svc, TCPPort, s.pod1, s.pod2)
	Eventually(t, wait, "sticky service", func() error {
		seen, err := backends(e, vip(svc), 20)
		if err != nil {
			return err
		}
		if len(seen) != 1 {
			return fmt.Errorf("answers spread over %v", seen)
		}
		return nil
	})
}

func externalTrafficPolicyLocal(t *testing.T, e *Env, s stack) {
	local := s.service("local", v1.ProtocolTCP, TCPPort)
	local.Spec.Type = v1.ServiceTypeLoadBalancer
	local.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	svc := s.create(t, e, local)
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: s.lbIP}}
	svc, err := e.Kube.CoreV1().Services("default").UpdateStatus(t.Context(), svc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("set LB ingress: %v", err)
	}
	if svc.Spec.HealthCheckNodePort == 0 {
		t.Fatal("API server allocated no healthCheckNodePort")
	}
	hc := net.JoinHostPort(s.nodeIP, fmt.Sprint(svc.Spec.HealthCheckNodePort))
	Eventually(t, wait, "health check 503 without local endpoints", func() error {
		code, _, err := httpGet(e, hc)
		if err == nil && code != http.StatusServiceUnavailable {
			err = fmt.Errorf("status %d", code)
		}
		return err
	})
	entries := []string{
		net.JoinHostPort(s.nodeIP, fmt.Sprint(svc.Spec.Ports[0].NodePort)),
		net.JoinHostPort(s.lbIP, fmt.Sprint(svc.Spec.Ports[0].Port)),
	}
	// Only a remote endpoint: a client from outside the cluster has none
	// it may use, and is told so at once rather than left to time out.
	e.SetEndpoints(t, svc, TCPPort, s.pod2)
	for _, addr := range entries {
		Eventually(t, wait, "eTP Local without local endpoints refused at "+addr, func() error {
			return refusedAtOnce(e.Client, addr)
		})
	}
	e.SetEndpoints(t, svc, TCPPort, s.pod1, s.pod2)
	for _, addr := range entries {
		Eventually(t, wait, "eTP Local at "+addr, func() error { return onlyLocalSeesClient(e, s, addr) })
	}
	Eventually(t, wait, "health check 200 with 1 local endpoint", func() error {
		code, body, err := httpGet(e, hc)
		if err != nil {
			return err
		}
		var v struct{ LocalEndpoints int }
		_ = json.Unmarshal(body, &v)
		if code != http.StatusOK || v.LocalEndpoints != 1 {
			return fmt.Errorf("status %d body %s", code, body)
		}
		return nil
	})
}

// externalTrafficPolicyLocalFromInside: pods and the node itself reaching
// an eTP=Local Service's external entry points are inside the cluster, so
// any endpoint will do; a node without local endpoints must not refuse or
// blackhole them (kubernetes#71596). Pods keep their source address, as
// they do through the ClusterIP.
func externalTrafficPolicyLocalFromInside(t *testing.T, e *Env, s stack) {
	local := s.service("local-inside", v1.ProtocolTCP, TCPPort)
	local.Spec.Type = v1.ServiceTypeLoadBalancer
	local.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	// Another port than ExternalTrafficPolicyLocal's Service on the same
	// LB IP.
	local.Spec.Ports[0].Port = TCPPort + 1
	svc := s.create(t, e, local)
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: s.lbIP}}
	svc, err := e.Kube.CoreV1().Services("default").UpdateStatus(t.Context(), svc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("set LB ingress: %v", err)
	}
	e.SetEndpoints(t, svc, TCPPort, s.pod2) // none on this node
	lb := net.JoinHostPort(s.lbIP, fmt.Sprint(svc.Spec.Ports[0].Port))
	nodePort := net.JoinHostPort(s.nodeIP, fmt.Sprint(svc.Spec.Ports[0].NodePort))
	for _, addr := range []string{lb, nodePort} {
		Eventually(t, wait, "pod1 reaching the remote endpoint at "+addr, func() error {
			r, err := DialTCP(e.Pod1, addr, time.Second)
			switch {
			case err != nil:
				return err
			case r.Backend != "pod2":
				return fmt.Errorf("answered by %s", r.Backend)
			}
			if host, _, _ := net.SplitHostPort(r.Peer); host != s.pod1.IP {
				return fmt.Errorf("backend saw %s, not the pod %s", r.Peer, s.pod1.IP)
			}
			return nil
		})
	}
	Eventually(t, wait, "the node reaching the remote endpoint at "+lb, func() error {
		return answeredBy(e.Node, lb, "pod2")
	})
}

// refusedAtOnce checks that a connection from ns to addr is refused
// within a second (a reset, not a drop).
func refusedAtOnce(ns *nettest.NS, addr string) error {
	start := time.Now()
	_, err := DialTCP(ns, addr, 3*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("dial: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		return fmt.Errorf("refusal took %v", d)
	}
	return nil
}

// onlyLocalSeesClient checks that connections to addr reach only the local
// pod and keep the client's source address (eTP Local does not SNAT).
func onlyLocalSeesClient(e *Env, s stack, addr string) error {
	for range 10 {
		r, err := DialTCP(e.Client, addr, time.Second)
		if err != nil {
			return err
		}
		if r.Backend != "pod1" {
			return fmt.Errorf("answered by remote %s", r.Backend)
		}
		if host, _, _ := net.SplitHostPort(r.Peer); host != s.clientIP {
			return fmt.Errorf("backend saw %s, not the client %s", r.Peer, s.clientIP)
		}
	}
	return nil
}

func removedUDPEndpointGetsNoMoreDatagrams(t *testing.T, e *Env, s stack) {
	svc := s.create(t, e, s.service("dns", v1.ProtocolUDP, UDPPort))
	e.SetEndpoints(t, svc, UDPPort, s.pod1, s.pod2)
	var c net.Conn
	var first Reply
	Eventually(t, wait, "UDP service answers", func() error {
		var err error
		if c != nil {
			c.Close()
		}
		if c, err = DialUDP(e.Client, vip(svc)); err != nil {
			return err
		}
		first, err = AskUDP(c, 300*time.Millisecond)
		return err
	})
	defer c.Close()
	// Same 5-tuple: conntrack pins it to the first backend.
	for range 5 {
		r, err := AskUDP(c, time.Second)
		if err != nil || r.Backend != first.Backend {
			t.Fatalf("before removal: %v %v (first %s)", r, err, first.Backend)
		}
	}
	keep := s.pod1
	if first.Backend == "pod1" {
		keep = s.pod2
	}
	e.SetEndpoints(t, svc, UDPPort, keep)
	// A NAT data plane deletes the flow's conntrack entry, so the same
	// socket's next datagram goes to a live endpoint. A data plane that
	// connected the socket to the endpoint itself (ebpf socket LB) cannot
	// move it: it closes it instead, and the application's next send or
	// receive fails (ECONNABORTED, then EDESTADDRREQ on a connected
	// socket that lost its peer), as a resolver then reconnects. Either
	// way the removed endpoint gets nothing more, and the service answers
	// from a live one.
	Eventually(t, wait, "datagrams move off the removed endpoint", func() error {
		r, err := AskUDP(c, 300*time.Millisecond)
		if errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EDESTADDRREQ) {
			nc, derr := DialUDP(e.Client, vip(svc))
			if derr != nil {
				return derr
			}
			defer nc.Close()
			r, err = AskUDP(nc, 300*time.Millisecond)
		}
		if err != nil {
			return err
		}
		if r.Backend == first.Backend {
			return fmt.Errorf("still answered by removed %s", r.Backend)
		}
		return nil
	})
}

// removedDeadEndpointFreesItsClients: a client whose SYN went to an endpoint
// that never answered (its pod died before it left the Service) must reach a
// live endpoint from the same 5-tuple as soon as the dead one is removed. A
// NAT data plane keeps the unanswered flow's DNAT for SYN_SENT's 120 s, so
// without the proxy's cleanup every client whose ephemeral port comes round
// to it times out for two minutes: the chaos suite's failed connections in
// endpoint churn after a node cut.
func removedDeadEndpointFreesItsClients(t *testing.T, e *Env, s stack) {
	svc := s.create(t, e, s.service("dead", v1.ProtocolTCP, TCPPort))
	e.SetEndpoints(t, svc, TCPPort, s.dead)
	Eventually(t, wait, "connections to the dead endpoint", func() error {
		return wentNowhere(DialTCP(e.Client, vip(svc), 300*time.Millisecond))
	})
	// One port, outside the ephemeral range, for the flow to the dead
	// endpoint and the client's next try.
	local := net.JoinHostPort(s.clientIP, "24680")
	if err := wentNowhere(dialFrom(e.Client, local, vip(svc), 300*time.Millisecond)); err != nil {
		t.Fatalf("first try from %s: %v", local, err)
	}
	e.SetEndpoints(t, svc, TCPPort, s.pod1)
	Eventually(t, wait, "the live endpoint from the dead one's 5-tuple", func() error {
		r, err := dialFrom(e.Client, local, vip(svc), 500*time.Millisecond)
		if err == nil && r.Backend != "pod1" {
			err = fmt.Errorf("answered by %s", r.Backend)
		}
		return err
	})
}

// wentNowhere is nil when a dial's error says its SYN went unanswered:
// timed out, or the node found no neighbour for the endpoint.
func wentNowhere(_ Reply, err error) error {
	var ne net.Error
	switch {
	case err == nil:
		return errors.New("answered")
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, syscall.EHOSTUNREACH):
		return nil
	}
	return fmt.Errorf("not unanswered: %w", err)
}

// dialFrom is DialTCP from a fixed local ip:port. SO_REUSEADDR lets a
// test reuse a port whose last connection never got past its SYN.
func dialFrom(ns *nettest.NS, local, addr string, timeout time.Duration) (Reply, error) {
	d, err := fixedPortDialer(local, timeout)
	if err != nil {
		return Reply{}, err
	}
	return dialTCPWith(ns, d, addr, timeout)
}

// fixedPortDialer dials from the ip:port local with SO_REUSEADDR.
func fixedPortDialer(local string, timeout time.Duration) (net.Dialer, error) {
	la, err := net.ResolveTCPAddr("tcp", local)
	if err != nil {
		return net.Dialer{}, err
	}
	return net.Dialer{LocalAddr: la, Timeout: timeout, Control: nettest.ReuseAddr}, nil
}

// snatedClientReusingPortsIsNotStalled: a client that cycles through a
// few source ports (as netperf's TCP_CRR, or any busy client, wraps its
// port range) opens connections through a NodePort, whose traffic is
// SNATed, to a server that closes first and so holds each finished
// connection in TIME_WAIT. Reusing a source port reopens the flow's
// conntrack entry with a fresh SNAT mapping; with a random source port
// (MASQUERADE --random-fully) the new mapping lands on tuples the server
// still holds in TIME_WAIT from other connections, whose TCP timestamps
// (offset per 4-tuple) are unrelated, so PAWS rejects about half of those
// SYNs and each waits for a retransmission (1 s on a fresh path: netperf's
// TCP_CRR through a NodePort collapsed from 7,000 to 200 connections/s on
// kind). Port-preserving SNAT maps a reused flow onto its own old tuple,
// which the server takes over.
func snatedClientReusingPortsIsNotStalled(t *testing.T, e *Env, s stack) {
	addr := nodePortToPod2(t, e, s, "np-reuse", CloseFirstPort)
	// 3,000 connections over 200 ports: with random SNAT ports about 70
	// land on a tuple in TIME_WAIT (n²/2¹⁷) and some 35 SYNs are retransmitted.
	const conns, ports = 3000, 200
	// A SYN-ACK delayed past the retransmission timer on a loaded machine
	// retransmits too; a few of those are not this bug.
	const tolerated = 3
	// Below the ephemeral range (32768–60999), where the earlier cases'
	// connections could still hold a port (TIME_WAIT), and each family its
	// own ports.
	firstPort := 21000
	if s.family == proxy.IPv6 {
		firstPort += ports
	}
	before, err := synRetransmits(e.Client)
	if err != nil {
		t.Fatal(err)
	}
	for i := range conns {
		local := net.JoinHostPort(s.clientIP, fmt.Sprint(firstPort+i%ports))
		if err := dialFromUntilClosed(e.Client, local, addr, 5*time.Second); err != nil {
			t.Fatalf("connection %d of %d, from %s: %v", i+1, conns, local, err)
		}
	}
	after, err := synRetransmits(e.Client)
	if err != nil {
		t.Fatal(err)
	}
	if n := after - before; n > tolerated {
		t.Fatalf("%d of %d connections had their SYN retransmitted (more than %d): the server refused SNATed SYNs on tuples in TIME_WAIT", n, conns, tolerated)
	}
}

// synRetransmits is the SYN retransmissions counter of ns
// (TcpExtTCPSynRetrans in /proc/net/netstat).
func synRetransmits(ns *nettest.NS) (int64, error) {
	var b []byte
	// thread-self: /proc/self/net is the netns of the process's first
	// thread, not of the one Do runs on.
	err := ns.Do(func() error {
		var err error
		b, err = os.ReadFile("/proc/thread-self/net/netstat")
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read netstat: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) != len(names) {
			continue
		}
		for k, n := range names {
			if n == "TCPSynRetrans" {
				return strconv.ParseInt(values[k], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no TcpExt TCPSynRetrans in netstat")
}

// dialFromUntilClosed connects from a fixed local ip:port and reads until
// the server closes, so the server's close comes first: the server, not
// the client, holds the connection in TIME_WAIT, and the port is free for
// the client's next connection.
func dialFromUntilClosed(ns *nettest.NS, local, addr string, timeout time.Duration) error {
	d, err := fixedPortDialer(local, timeout)
	if err != nil {
		return err
	}
	c, err := dialIn(ns, d, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	if _, err := io.Copy(io.Discard, c); err != nil {
		return fmt.Errorf("read until the server closes: %w", err)
	}
	return nil
}

func hairpin(t *testing.T, e *Env, s stack) {
	svc := s.create(t, e, s.service("hairpin", v1.ProtocolTCP, TCPPort))
	e.SetEndpoints(t, svc, TCPPort, s.pod1)
	Eventually(t, wait, "pod1 reaching itself through its service", func() error {
		return answeredBy(e.Pod1, vip(svc), "pod1")
	})
}

// dualStackServiceAnswersPerFamily: one RequireDualStack Service gets a
// ClusterIP per family, each fed by its own EndpointSlice. Giving the two
// slices different pods shows each family's ClusterIP uses its own slice.
func dualStackServiceAnswersPerFamily(t *testing.T, e *Env) {
	dual := Service("dual", v1.ProtocolTCP, TCPPort)
	policy := v1.IPFamilyPolicyRequireDualStack
	dual.Spec.IPFamilyPolicy = &policy
	svc := e.CreateService(t, dual)
	if len(svc.Spec.IPFamilies) != 2 || svc.Spec.IPFamilies[0] != v1.IPv4Protocol || len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("dual-stack service got families %v, clusterIPs %v; want IPv4 then IPv6", svc.Spec.IPFamilies, svc.Spec.ClusterIPs)
	}
	e.SetEndpoints(t, svc, TCPPort, Pod1)   // the IPv4 slice
	e.SetEndpoints(t, svc, TCPPort, Pod2v6) // the IPv6 slice
	port := fmt.Sprint(svc.Spec.Ports[0].Port)
	for ip, want := range map[string]string{svc.Spec.ClusterIPs[0]: "pod1", svc.Spec.ClusterIPs[1]: "pod2"} {
		addr := net.JoinHostPort(ip, port)
		Eventually(t, wait, want+" behind "+addr, func() error { return answeredBy(e.Client, addr, want) })
	}
}

// httpGet does a plain HTTP GET from the client namespace (the socket is
// created inside it; net/http would dial from another goroutine).
func httpGet(e *Env, hostport string) (int, []byte, error) {
	var c net.Conn
	if err := e.Client.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp", hostport, time.Second)
		return err
	}); err != nil {
		return 0, nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.0\r\nHost: %s\r\n\r\n", hostport); err != nil {
		return 0, nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func counterValue(t testing.TB, p *proxy.Proxy, name string) float64 {
	t.Helper()
	mfs, err := p.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += metricNumber(m)
		}
	}
	return sum
}

func metricNumber(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}
