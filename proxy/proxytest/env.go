package proxytest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
)

// IPv4 addresses of the topology (the IPv6 ones are in stack.go).
const (
	NodeName = "node-a"
	NodeIP   = "192.168.50.1"
	ClientIP = "192.168.50.2"
	Pod1IP   = "10.244.1.2" // on this node
	Pod2IP   = "10.244.2.2" // reported as on another node
	// The node's addresses on the links to the pods: the source a
	// masquerading proxy gives a flow it forwards to that pod.
	Pod1GatewayIP = "10.244.1.1"
	Pod2GatewayIP = "10.244.2.1"
	ClusterCID    = "10.244.0.0/16"
	TCPPort       = 8080
	UDPPort       = 5353
	// CloseFirstPort's server sends its greeting and closes: it, not the
	// client, keeps every finished connection in TIME_WAIT, as netperf's
	// TCP_CRR server and most request/response servers do.
	CloseFirstPort = 8081
	LBIP           = "192.168.60.10"
)

// NewDataPlane builds the data plane under test for family f programming
// node (e.g. an iptables runner with the prefix "ip netns exec <node>").
type NewDataPlane func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane

// families are the IP families StartProxy runs a data plane for: the proxy
// is dual-stack, one data plane per family, as `nodenet proxy` runs it.
var families = []proxy.Family{proxy.IPv4, proxy.IPv6}

// Env is a running topology.
type Env struct {
	Node, Pod1, Pod2, Client *nettest.NS
	API                      *testapi.Server
	Kube                     kubernetes.Interface

	// Config, when set, adjusts the core's configuration before
	// StartProxy / StartProxyWith start it.
	Config func(*proxy.Config)

	newDP   NewDataPlane
	mu      sync.Mutex
	proxy   *proxy.Proxy
	stop    context.CancelFunc
	stopped chan struct{}
}

// NewEnv builds the namespaces, starts echo servers and the API server, and
// creates this node's Node object. The proxy is started with StartProxy.
func NewEnv(t *testing.T, newDP NewDataPlane) *Env {
	t.Helper()
	e := &Env{newDP: newDP}
	e.Node, e.Pod1, e.Pod2, e.Client = nettest.New(t), nettest.New(t), nettest.New(t), nettest.New(t)
	e.wire(t)
	for _, p := range []struct {
		ns   *nettest.NS
		name string
	}{{e.Pod1, "pod1"}, {e.Pod2, "pod2"}} {
		// The servers listen on the wildcard address, which takes both
		// families, so one server per pod answers IPv4 and IPv6 alike.
		serveTCP(t, p.ns, p.name, TCPPort)
		serveTCPCloseFirst(t, p.ns, p.name, CloseFirstPort)
		serveUDP(t, p.ns, p.name, UDPPort)
	}
	e.API = testapi.Start(t, func(c *apiserver.Config) { c.ServiceClusterIPRanges = serviceCIDRs })
	e.Kube = e.API.Client
	ctx := testapi.Context(t)
	_, err := e.Kube.CoreV1().Nodes().Create(ctx, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{v1.LabelTopologyZone: "zone-a"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: NodeIP}, {Type: v1.NodeInternalIP, Address: NodeIP6},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	t.Cleanup(e.StopProxy)
	return e
}

// segment is one veth between the node and another namespace, with both
// families' addresses; the far end routes everything through the node.
type segment struct {
	nodeIf       string
	peer         *nettest.NS
	node4, peer4 string // IPv4 addresses, /24
	node6, peer6 string // IPv6 addresses, /64
}

// wire links client → node → pods for IPv4 and IPv6.
func (e *Env) wire(t *testing.T) {
	t.Helper()
	for _, ns := range []*nettest.NS{e.Node, e.Pod1, e.Pod2, e.Client} {
		// Link-local addresses would otherwise stay tentative for a
		// second or two, and until then the node sends no neighbour
		// solicitations for the traffic it forwards. Set before the links
		// exist so every interface inherits it.
		ns.MustExec(t, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	for _, s := range []segment{
		{"p1", e.Pod1, Pod1GatewayIP, Pod1IP, Pod1GatewayIP6, Pod1IP6},
		{"p2", e.Pod2, Pod2GatewayIP, Pod2IP, Pod2GatewayIP6, Pod2IP6},
		{"c0", e.Client, NodeIP, ClientIP, NodeIP6, ClientIP6},
	} {
		nettest.Link(t, e.Node, s.nodeIf, s.node4+"/24", s.peer, "eth0", s.peer4+"/24")
		addIPv6(t, e.Node, s.nodeIf, s.node6+"/64")
		addIPv6(t, s.peer, "eth0", s.peer6+"/64")
		s.peer.MustExec(t, "ip", "route", "add", "default", "via", s.node4)
		s.peer.MustExec(t, "ip", "-6", "route", "add", "default", "via", s.node6)
	}
	e.Node.MustExec(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	// The node's own traffic to service VIPs needs a route to start from.
	e.Node.MustExec(t, "ip", "route", "add", "default", "via", ClientIP)
	e.Node.MustExec(t, "ip", "-6", "route", "add", "default", "via", ClientIP6)
}

// addIPv6 adds cidr to ifName in ns, usable at once (nodad).
func addIPv6(t *testing.T, ns *nettest.NS, ifName, cidr string) {
	t.Helper()
	ns.MustExec(t, "ip", "-6", "addr", "add", cidr, "dev", ifName, "nodad")
}

// StartProxy starts the proxy core with a fresh data plane from newDP for
// every family in families.
func (e *Env) StartProxy(t testing.TB) *proxy.Proxy {
	t.Helper()
	planes := make(map[proxy.Family]proxy.DataPlane, len(families))
	for _, f := range families {
		planes[f] = e.newDP(t, e.Node, f)
	}
	return e.StartProxyWith(t, planes)
}

// StartProxyWith starts the proxy core driving planes (one per family).
func (e *Env) StartProxyWith(t testing.TB, planes map[proxy.Family]proxy.DataPlane) *proxy.Proxy {
	t.Helper()
	cfg := proxy.Config{
		NodeName:      NodeName,
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix(ClusterCID), netip.MustParsePrefix(ClusterCID6)},
		MinSyncPeriod: 50 * time.Millisecond,
		SyncPeriod:    time.Hour,
		Conntrack:     proxy.NetlinkConntrack{Handle: e.Node.Handle()},
		HealthCheckListen: func(ctx context.Context, addr string) (net.Listener, error) {
			var ln net.Listener
			err := e.Node.Do(func() error {
				var err error
				ln, err = proxy.DefaultListen(ctx, addr)
				return err
			})
			return ln, err
		},
		Logger: testapi.Logger(),
	}
	if e.Config != nil {
		e.Config(&cfg)
	}
	p, err := proxy.New(cfg, planes)
	if err != nil {
		t.Fatalf("new proxy: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx, e.Kube); err != nil {
			t.Errorf("proxy run: %v", err)
		}
	}()
	e.mu.Lock()
	e.proxy, e.stop, e.stopped = p, cancel, done
	e.mu.Unlock()
	return p
}

// StopProxy stops the proxy (leaving the data plane in place) and waits.
func (e *Env) StopProxy() {
	e.mu.Lock()
	stop, done := e.stop, e.stopped
	e.stop, e.stopped = nil, nil
	e.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// serveTCP answers every connection with "<name> <peer>\n" and then echoes.
func serveTCP(t *testing.T, ns *nettest.NS, name string, port int) {
	acceptTCP(t, ns, name, port, func(c net.Conn) {
		fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr())
		_, _ = io.Copy(c, c)
	})
}

// serveTCPCloseFirst answers every connection with "<name> <peer>\n" and
// closes it.
func serveTCPCloseFirst(t *testing.T, ns *nettest.NS, name string, port int) {
	acceptTCP(t, ns, name, port, func(c net.Conn) {
		fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr())
	})
}

// acceptTCP listens on port in ns and runs serve for every connection,
// closing it afterwards.
func acceptTCP(t *testing.T, ns *nettest.NS, name string, port int, serve func(net.Conn)) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatalf("listen tcp in %s: %v", name, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
}

// serveUDP answers every datagram with "<name> <peer>".
func serveUDP(t *testing.T, ns *nettest.NS, name string, port int) {
	t.Helper()
	var pc net.PacketConn
	if err := ns.Do(func() error {
		var err error
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatalf("listen udp in %s: %v", name, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(name+" "+from.String()), from)
		}
	}()
}

// Reply is what an echo server said: who answered and whom it saw.
type Reply struct {
	Backend string
	Peer    string // ip:port the backend saw
}

// DialTCP connects from ns to addr and reads the greeting.
func DialTCP(ns *nettest.NS, addr string, timeout time.Duration) (Reply, error) {
	return dialTCPWith(ns, net.Dialer{Timeout: timeout}, addr, timeout)
}

// dialTCPWith is DialTCP through d (a fixed local address, socket options).
func dialTCPWith(ns *nettest.NS, d net.Dialer, addr string, timeout time.Duration) (Reply, error) {
	c, err := dialIn(ns, d, addr)
	if err != nil {
		return Reply{}, err
	}
	defer c.Close()
	return readGreeting(c, timeout)
}

// dialIn connects to addr over TCP from ns through d.
func dialIn(ns *nettest.NS, d net.Dialer, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() error {
		var err error
		c, err = d.Dial("tcp", addr)
		return err
	})
	return c, err
}

func readGreeting(c net.Conn, timeout time.Duration) (Reply, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return Reply{}, fmt.Errorf("read greeting: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		return Reply{}, fmt.Errorf("bad greeting %q", line)
	}
	return Reply{Backend: f[0], Peer: f[1]}, nil
}

// DialUDP opens a connected UDP socket in ns (one fixed 5-tuple).
func DialUDP(ns *nettest.NS, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() error {
		var err error
		c, err = net.Dial("udp", addr)
		return err
	})
	return c, err
}

// AskUDP sends one datagram on c and waits for the answer.
func AskUDP(c net.Conn, timeout time.Duration) (Reply, error) {
	if _, err := c.Write([]byte("hi")); err != nil {
		return Reply{}, err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		return Reply{}, err
	}
	f := strings.Fields(string(buf[:n]))
	if len(f) != 2 {
		return Reply{}, fmt.Errorf("bad answer %q", buf[:n])
	}
	return Reply{Backend: f[0], Peer: f[1]}, nil
}

// Backend describes one endpoint for EndpointSlice.
type Backend struct {
	IP    string
	Node  string
	Ready bool
}

// Pod1 and Pod2 as backends (pod1 local, pod2 remote).
var (
	Pod1 = Backend{IP: Pod1IP, Node: NodeName, Ready: true}
	Pod2 = Backend{IP: Pod2IP, Node: "node-b", Ready: true}
)

// CreateService creates a Service (ClusterIP allocated by the API server)
// and returns it as stored.
func (e *Env) CreateService(t testing.TB, svc *v1.Service) *v1.Service {
	t.Helper()
	if svc.Namespace == "" {
		svc.Namespace = "default"
	}
	out, err := e.Kube.CoreV1().Services(svc.Namespace).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", svc.Name, err)
	}
	return out
}

// Service returns a one-port Service spec.
func Service(name string, proto v1.Protocol, port int32) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeClusterIP,
			Ports: []v1.ServicePort{{Name: "p", Port: port, Protocol: proto, TargetPort: intstr.FromInt(int(port))}},
		},
	}
}

// SetEndpoints creates or replaces the service's EndpointSlice for the
// backends' family (all backends must be of one family).
func (e *Env) SetEndpoints(t testing.TB, svc *v1.Service, port int32, backends ...Backend) {
	t.Helper()
	addrType := sliceAddressType(svc, backends)
	proto := svc.Spec.Ports[0].Protocol
	name := svc.Spec.Ports[0].Name
	sl := &discovery.EndpointSlice{
		// One slice per family, so a dual-stack service can have both.
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-" + strings.ToLower(string(addrType)), Namespace: svc.Namespace, Labels: map[string]string{
			discovery.LabelServiceName: svc.Name, discovery.LabelManagedBy: "proxytest",
		}},
		AddressType: addrType,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, b := range backends {
		ready := b.Ready
		node := b.Node
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{Addresses: []string{b.IP}, NodeName: &node,
			Conditions: discovery.EndpointConditions{Ready: &ready}})
	}
	cl := e.Kube.DiscoveryV1().EndpointSlices(svc.Namespace)
	ctx := context.Background()
	old, err := cl.Get(ctx, sl.Name, metav1.GetOptions{})
	if err == nil {
		sl.ResourceVersion = old.ResourceVersion
		_, err = cl.Update(ctx, sl, metav1.UpdateOptions{})
	} else {
		_, err = cl.Create(ctx, sl, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("write endpointslice %s: %v", sl.Name, err)
	}
}

// Eventually retries fn until it returns nil or d passes.
func Eventually(t testing.TB, d time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

var errNotYet = errors.New("not yet")
