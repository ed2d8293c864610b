package flanneld

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

// TestHostRoutingEBPF: flanneld --host-routing=ebpf, once per backend. Pods
// sit behind a cni0 bridge as the CNI plugin wires them; TCP between pods
// of two nodes works and none of it crosses the nodes' netfilter FORWARD
// hook, while the metric counts the packets the programs forwarded. Once
// the daemons stop, the programs are gone and netfilter sees the traffic
// again.
func TestHostRoutingEBPF(t *testing.T) {
	nettest.SkipShort(t, "daemons on several node namespaces")
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	api := testapi.Start(t)
	startIPAM(t, api)
	for _, tc := range []struct{ name, conf string }{
		{"hostgw", `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`},
		{"vxlan", `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, api, tc.conf, 2)
			for _, nd := range c.nodes {
				o := c.options(nd)
				o.HostRouting = HostRoutingEBPF
				c.startWith(nd, o)
				c.wireBridgedPod(nd)
				nd.ns.MustExec(t, "nft", "add table inet counted; add chain inet counted c { type filter hook forward priority 0; };"+
					" add rule inet counted c meta l4proto tcp counter")
			}
			n1, n2 := c.nodes[0], c.nodes[1]
			nettest.EchoTCP(t, n2.pod, net.JoinHostPort(n2.podIP.String(), "8080"))
			nettest.EchoTCP(t, n1.pod, net.JoinHostPort(n1.podIP.String(), "8080"))
			for _, p := range [][2]*testNode{{n1, n2}, {n2, n1}} {
				if err := nettest.TCPRoundTrip(p[0].pod, net.JoinHostPort(p[1].podIP.String(), "8080"), 100000, 5*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			for _, nd := range c.nodes {
				if n := forwardedTCP(t, nd); n != 0 {
					t.Errorf("%s: netfilter forwarded %d TCP packets between pods; want none", nd.name, n)
				}
				_, metrics := get(t, nd.d.Handler(), "/metrics")
				m := regexp.MustCompile(`nodenet_host_routing_packets_total\{outcome="forwarded"\} (\d+)`).FindStringSubmatch(metrics)
				if m == nil {
					t.Fatalf("%s: /metrics has no forwarded count:\n%s", nd.name, metrics)
				}
				if n, _ := strconv.Atoi(m[1]); n < 10 {
					t.Errorf("%s: the programs forwarded %d packets; want the whole exchange", nd.name, n)
				}
			}

			for _, nd := range c.nodes {
				c.stop(nd)
			}
			if err := nettest.TCPRoundTrip(n1.pod, net.JoinHostPort(n2.podIP.String(), "8080"), 1000, 5*time.Second); err != nil {
				t.Fatalf("after the daemons stopped: %v", err)
			}
			if forwardedTCP(t, n1) == 0 {
				t.Error("after the daemons stopped, netfilter still sees no pod traffic: programs left attached?")
			}
		})
	}
}

// wireBridgedPod gives nd a pod behind a cni0 bridge, as the CNI plugin
// does: the gateway (.1) on the bridge, the pod (.2) on a veth port.
func (c *testCluster) wireBridgedPod(nd *testNode) {
	t := c.t
	sn := c.subnet(nd)
	gw := sn.Addr().Next()
	nd.podIP = gw.Next()
	nd.pod = nettest.New(t)
	nd.ns.MustExec(t, "ip", "link", "add", DefaultPodBridge, "type", "bridge")
	nd.ns.MustExec(t, "ip", "addr", "add", fmt.Sprintf("%s/%d", gw, sn.Bits()), "dev", DefaultPodBridge)
	nd.ns.MustExec(t, "ip", "link", "set", DefaultPodBridge, "up")
	nettest.Link(t, nd.ns, "vpod", "", nd.pod, "eth0", fmt.Sprintf("%s/%d", nd.podIP, sn.Bits()))
	nd.ns.MustExec(t, "ip", "link", "set", "vpod", "master", DefaultPodBridge)
	nd.pod.MustExec(t, "ip", "route", "add", "default", "via", gw.String())
}

// forwardedTCP reads the node's count of TCP packets in FORWARD.
func forwardedTCP(t *testing.T, nd *testNode) int {
	t.Helper()
	return nettest.NFTPackets(t, nd.ns, "inet", "counted", "c")
}
