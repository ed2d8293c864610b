package hostrouting

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
)

// twoNodes is a host-gw pod network of two nodes in throwaway namespaces:
// each node has a pod bridge cni0 with one pod behind a veth, and the
// nodes reach each other's pod subnets through an uplink veth pair.
type twoNodes struct {
	node, pod [2]*nettest.NS
}

// Addresses: node i (0 or 1) has pod subnet 10.244.<i+1>.0/24 and
// fd44:<i+1>::/64, uplink 10.99.0.<i+1> and fd99::<i+1>.
func podAddr(i int, v6 bool) string {
	if v6 {
		return fmt.Sprintf("fd44:%d::2", i+1)
	}
	return fmt.Sprintf("10.244.%d.2", i+1)
}

func newTwoNodes(t *testing.T) *twoNodes {
	t.Helper()
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	c := &twoNodes{}
	for i := range 2 {
		c.node[i], c.pod[i] = nettest.New(t), nettest.New(t)
	}
	nettest.Link(t, c.node[0], "up0", "10.99.0.1/24", c.node[1], "up1", "10.99.0.2/24")
	for i := range 2 {
		n, p, peer := c.node[i], c.pod[i], 2-i
		up := "up" + strconv.Itoa(i)
		n.MustExec(t, "ip", "-6", "addr", "add", fmt.Sprintf("fd99::%d/64", i+1), "dev", up, "nodad")
		n.MustExec(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
		n.MustExec(t, "ip", "link", "add", "cni0", "type", "bridge")
		n.MustExec(t, "ip", "addr", "add", fmt.Sprintf("10.244.%d.1/24", i+1), "dev", "cni0")
		n.MustExec(t, "ip", "-6", "addr", "add", fmt.Sprintf("fd44:%d::1/64", i+1), "dev", "cni0", "nodad")
		n.MustExec(t, "ip", "link", "set", "cni0", "up")
		nettest.Link(t, p, "eth0", podAddr(i, false)+"/24", n, "veth0", "")
		p.MustExec(t, "ip", "-6", "addr", "add", podAddr(i, true)+"/64", "dev", "eth0", "nodad")
		n.MustExec(t, "ip", "link", "set", "veth0", "master", "cni0")
		p.MustExec(t, "ip", "route", "add", "default", "via", fmt.Sprintf("10.244.%d.1", i+1))
		p.MustExec(t, "ip", "-6", "route", "add", "default", "via", fmt.Sprintf("fd44:%d::1", i+1))
		n.MustExec(t, "ip", "route", "add", fmt.Sprintf("10.244.%d.0/24", peer), "via", fmt.Sprintf("10.99.0.%d", peer))
		n.MustExec(t, "ip", "-6", "route", "add", fmt.Sprintf("fd44:%d::/64", peer), "via", fmt.Sprintf("fd99::%d", peer))
		// Counts the TCP packets netfilter forwards: zero when the
		// programs forward them.
		n.MustExec(t, "nft", "add table inet t; add chain inet t counted { type filter hook forward priority 0; };"+
			" add rule inet t counted meta l4proto tcp counter")
	}
	return c
}

func (c *twoNodes) config(i int) Config {
	return Config{
		Netns:        c.node[i].Path(),
		PodNetworks:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd44::/16")},
		LocalSubnets: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i+1)), netip.MustParsePrefix(fmt.Sprintf("fd44:%d::/64", i+1))},
		Bridge:       "cni0",
		Uplinks:      []string{"up" + strconv.Itoa(i)},
	}
}

func (c *twoNodes) start(t *testing.T, i int) *Router {
	t.Helper()
	r, err := Start(context.Background(), c.config(i), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// netfilterForwarded is the node's count of TCP packets in FORWARD.
func (c *twoNodes) netfilterForwarded(t *testing.T, i int) int {
	t.Helper()
	return nettest.NFTPackets(t, c.node[i], "inet", "t", "counted")
}

// resolve sends a UDP datagram each way in both families and waits until
// the neighbour entries the programs need exist on both nodes: until then
// the programs leave packets to the stack, which resolves them.
func (c *twoNodes) resolve(t *testing.T) {
	t.Helper()
	for _, v6 := range []bool{false, true} {
		for i := range 2 {
			dst := net.JoinHostPort(podAddr(1-i, v6), "9")
			err := c.pod[i].Do(func() error {
				conn, err := net.Dial("udp", dst)
				if err != nil {
					return err
				}
				defer conn.Close()
				_, err = conn.Write([]byte("hello"))
				return err
			})
			if err != nil {
				t.Fatalf("send to %s: %v", dst, err)
			}
		}
	}
	want := func(i int) []string {
		peer := 2 - i
		return []string{podAddr(i, false), podAddr(i, true), fmt.Sprintf("10.99.0.%d", peer), fmt.Sprintf("fd99::%d", peer)}
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := range 2 {
		for _, addr := range want(i) {
			for {
				out := string(c.node[i].MustExec(t, "ip", "neigh", "show", "to", addr))
				if strings.Contains(out, "lladdr") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("node %d: no neighbour entry for %s: %q", i, addr, out)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

// exchange runs a TCP echo in pod 1 on listen and checks a round trip of
// 10 kB from pod 0 to dial.
func (c *twoNodes) exchange(t *testing.T, dial string, listen string) {
	t.Helper()
	nettest.EchoTCP(t, c.pod[1], listen)
	if err := nettest.TCPRoundTrip(c.pod[0], dial, 10000, 3*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestForwardsPodToPodPastNetfilter(t *testing.T) {
	c := newTwoNodes(t)
	c.resolve(t)
	// Control: without the programs, netfilter forwards the flow.
	c.exchange(t, net.JoinHostPort(podAddr(1, false), "8080"), net.JoinHostPort(podAddr(1, false), "8080"))
	if c.netfilterForwarded(t, 0) == 0 || c.netfilterForwarded(t, 1) == 0 {
		t.Fatal("control: netfilter's counter saw no forwarded TCP packet without host routing")
	}
	// Anonymous rule counters cannot be reset in nft 1.0.6: compare.
	before := [2]int{c.netfilterForwarded(t, 0), c.netfilterForwarded(t, 1)}

	r0, r1 := c.start(t, 0), c.start(t, 1)
	for _, v6 := range []bool{false, true} {
		addr := net.JoinHostPort(podAddr(1, v6), "8081")
		c.exchange(t, addr, addr)
	}
	for i, r := range []*Router{r0, r1} {
		if n := c.netfilterForwarded(t, i) - before[i]; n != 0 {
			c, _ := r.Counts()
			t.Errorf("node %d: netfilter forwarded %d TCP packets; want all of them past the stack (counts %v)", i, n, c)
		}
		counts, err := r.Counts()
		if err != nil {
			t.Fatal(err)
		}
		// Both families, both directions: SYN, data and FIN each way,
		// out of the sender's node and into the receiving pod.
		if counts["forwarded"] < 8 || counts["delivered"] < 8 {
			t.Errorf("node %d: forwarded %d packets and delivered %d, want at least 8 each (counts %v)", i, counts["forwarded"], counts["delivered"], counts)
		}
		if got := r.Attached(); strings.Join(got, ",") != "up"+strconv.Itoa(i)+",veth0" {
			t.Errorf("node %d: attached to %v", i, got)
		}
	}

	// Detached, netfilter sees the traffic again.
	r0.Close()
	r1.Close()
	c.exchange(t, net.JoinHostPort(podAddr(1, false), "8082"), net.JoinHostPort(podAddr(1, false), "8082"))
	if c.netfilterForwarded(t, 0) == before[0] {
		t.Error("after Close the stack should forward again")
	}
}

// A flow the node NATs (a service's DNAT, here a plain nft rule) must meet
// the stack in both directions: its replies need the reverse translation.
func TestLeavesTranslatedFlowsToTheStack(t *testing.T) {
	c := newTwoNodes(t)
	c.resolve(t)
	c.node[0].MustExec(t, "nft", "add table ip nat; add chain ip nat pre { type nat hook prerouting priority -100; };"+
		" add rule ip nat pre ip daddr 10.96.0.10 tcp dport 80 dnat to "+podAddr(1, false)+":8080")
	r0, _ := c.start(t, 0), c.start(t, 1)
	c.exchange(t, "10.96.0.10:80", net.JoinHostPort(podAddr(1, false), "8080"))
	counts, err := r0.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if counts["nat"] == 0 {
		t.Errorf("node 0 passed no translated packet to the stack: %v", counts)
	}
	if c.netfilterForwarded(t, 0) == 0 {
		t.Error("node 0: the translated flow did not go through netfilter")
	}
}

// The CNI plugin creates the bridge with the first pod and a node may
// re-create it: the program follows it.
func TestFollowsTheBridge(t *testing.T) {
	c := newTwoNodes(t)
	n := c.node[0]
	n.MustExec(t, "ip", "link", "del", "cni0")
	r, _ := c.start(t, 0), c.start(t, 1)
	if got := r.Attached(); strings.Join(got, ",") != "up0" {
		t.Fatalf("attached to %v before the bridge exists", got)
	}
	n.MustExec(t, "ip", "link", "add", "cni0", "type", "bridge")
	n.MustExec(t, "ip", "addr", "add", "10.244.1.1/24", "dev", "cni0")
	n.MustExec(t, "ip", "-6", "addr", "add", "fd44:1::1/64", "dev", "cni0", "nodad")
	n.MustExec(t, "ip", "link", "set", "cni0", "up")
	n.MustExec(t, "ip", "link", "set", "veth0", "master", "cni0")
	deadline := time.Now().Add(5 * time.Second)
	for strings.Join(r.Attached(), ",") != "up0,veth0" {
		if time.Now().After(deadline) {
			t.Fatalf("attached to %v, want up0 and veth0", r.Attached())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.resolve(t)
	before, _ := r.Counts()
	c.exchange(t, net.JoinHostPort(podAddr(1, false), "8080"), net.JoinHostPort(podAddr(1, false), "8080"))
	after, err := r.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if after["forwarded"] <= before["forwarded"] {
		t.Errorf("nothing forwarded through the re-created bridge: %v", after)
	}
}

// Nothing resolved and nothing learnt yet: the first packets make the
// kernel resolve the next hops (bpf_redirect_neigh) and reach the pod
// through the bridge; once the pod has answered, its veth is known and
// packets go straight into it.
func TestResolvesNeighboursAndLearnsPods(t *testing.T) {
	c := newTwoNodes(t)
	r0, r1 := c.start(t, 0), c.start(t, 1)
	c.exchange(t, net.JoinHostPort(podAddr(1, false), "8080"), net.JoinHostPort(podAddr(1, false), "8080"))
	for i, r := range []*Router{r0, r1} {
		counts, err := r.Counts()
		if err != nil {
			t.Fatal(err)
		}
		if counts["no_route"] != 0 || counts["delivered"] == 0 {
			t.Errorf("node %d: counts %v; want no packet left to the stack and some delivered into the pod", i, counts)
		}
		if n := c.netfilterForwarded(t, i); n != 0 {
			t.Errorf("node %d: netfilter forwarded %d TCP packets", i, n)
		}
	}
}

// A pod's veth deleted: its attachment and what the fdb learnt on it go.
func TestForgetsDeletedPods(t *testing.T) {
	c := newTwoNodes(t)
	c.start(t, 0)
	r1 := c.start(t, 1)
	c.resolve(t)
	l, err := c.node[1].Handle().LinkByName("veth0")
	if err != nil {
		t.Fatal(err)
	}
	learnt := func() int {
		var (
			k hostroutingMacKey
			v uint32
			n int
		)
		for it := r1.objs.Fdb.Iterate(); it.Next(&k, &v); {
			if int(v) == l.Attrs().Index {
				n++
			}
		}
		return n
	}
	if learnt() == 0 {
		t.Fatal("the pod's MAC was not learnt on its veth")
	}
	c.node[1].MustExec(t, "ip", "link", "del", "veth0")
	deadline := time.Now().Add(5 * time.Second)
	for learnt() != 0 || strings.Join(r1.Attached(), ",") != "up1" {
		if time.Now().After(deadline) {
			t.Fatalf("after the veth's deletion: attached to %v, %d fdb entries on it", r1.Attached(), learnt())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two pods on one node: their frames are switched straight into each
// other's namespace, past the bridge (whose forward hook counts none of
// them), unless conntrack translates the flow: a service-like DNAT to the
// second pod still gets its reverse translation from the stack.
func TestSwitchesLocalPodToPodPastTheBridge(t *testing.T) {
	c := newTwoNodes(t)
	n, a := c.node[0], c.pod[0]
	b := nettest.New(t)
	const bV4, bV6 = "10.244.1.3", "fd44:1::3"
	nettest.Link(t, b, "eth0", bV4+"/24", n, "veth1", "")
	b.MustExec(t, "ip", "-6", "addr", "add", bV6+"/64", "dev", "eth0", "nodad")
	n.MustExec(t, "ip", "link", "set", "veth1", "master", "cni0")
	b.MustExec(t, "ip", "route", "add", "default", "via", "10.244.1.1")
	// Counts the TCP frames the bridge forwards between its ports.
	n.MustExec(t, "nft", "add table bridge b; add chain bridge b switched { type filter hook forward priority 0; };"+
		" add rule bridge b switched meta l4proto tcp counter")
	bridged := func() int { return nettest.NFTPackets(t, n, "bridge", "b", "switched") }
	n.MustExec(t, "nft", "add table ip nat; add chain ip nat pre { type nat hook prerouting priority -100; };"+
		" add rule ip nat pre ip daddr 10.96.0.10 tcp dport 80 dnat to "+bV4+":8080")
	for _, addr := range []string{net.JoinHostPort(bV4, "8080"), net.JoinHostPort(bV6, "8080")} {
		nettest.EchoTCP(t, b, addr)
	}
	roundTrip := func(addr string) {
		t.Helper()
		if err := nettest.TCPRoundTrip(a, addr, 10000, 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Control: without the programs the bridge forwards the flow.
	roundTrip(net.JoinHostPort(bV4, "8080"))
	before := bridged()
	if before == 0 {
		t.Fatal("control: the bridge forwarded no TCP frame between its pods without host routing")
	}

	r := c.start(t, 0)
	// The programs learn both pods' MACs from the first frames each sends
	// (neighbour discovery); until then the bridge switches.
	for _, addr := range []string{net.JoinHostPort(bV4, "8080"), net.JoinHostPort(bV6, "8080")} {
		roundTrip(addr)
	}
	warm, err := r.Counts()
	if err != nil {
		t.Fatal(err)
	}
	before = bridged()
	for _, addr := range []string{net.JoinHostPort(bV4, "8080"), net.JoinHostPort(bV6, "8080")} {
		roundTrip(addr)
	}
	counts, err := r.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if got := bridged() - before; got != 0 {
		t.Errorf("the bridge forwarded %d TCP frames between local pods; want all of them switched (counts %v)", got, counts)
	}
	// SYN, data and FIN each way, in both families.
	if got := counts["switched"] - warm["switched"]; got < 8 {
		t.Errorf("switched %d packets between local pods, want at least 8 (counts %v)", got, counts)
	}
	if counts["forwarded"] != 0 || counts["delivered"] != 0 {
		t.Errorf("a same-node exchange was routed: %v", counts)
	}

	// Through the DNAT: the replies (b to a, both local pods) must meet
	// conntrack's reverse translation, so they go to the stack.
	roundTrip("10.96.0.10:80")
	after, err := r.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if after["nat"] == counts["nat"] {
		t.Errorf("the translated flow's replies were not left to the stack: %v", after)
	}
}

// A restarted router (fresh maps) knows at once the pod MACs the kernel
// bridge learnt, so a pod that only receives is switched to without
// first sending a frame of its own; the bridge's own addresses are not
// taken.
func TestSeedsFdbFromTheBridge(t *testing.T) {
	c := newTwoNodes(t)
	n, a := c.node[0], c.pod[0]
	b := nettest.New(t)
	nettest.Link(t, b, "eth0", "10.244.1.3/24", n, "veth1", "")
	n.MustExec(t, "ip", "link", "set", "veth1", "master", "cni0")
	nettest.EchoTCP(t, b, "10.244.1.3:8080")
	// The bridge learns both pods' MACs from this exchange.
	if err := nettest.TCPRoundTrip(a, "10.244.1.3:8080", 100, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	mac := func(ns *nettest.NS) [6]uint8 {
		l, err := ns.Handle().LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		return [6]uint8(l.Attrs().HardwareAddr)
	}
	index := func(name string) uint32 {
		l, err := n.Handle().LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(l.Attrs().Index)
	}
	r := c.start(t, 0)
	got := map[[6]uint8]uint32{}
	var (
		k hostroutingMacKey
		v uint32
	)
	for it := r.objs.Fdb.Iterate(); it.Next(&k, &v); {
		got[k.Mac] = v
	}
	want := map[[6]uint8]uint32{mac(a): index("veth0"), mac(b): index("veth1")}
	for m, idx := range want {
		if got[m] != idx {
			t.Errorf("fdb map after start: %x → %d, want %d (map %v)", m, got[m], idx, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("fdb map after start holds %d entries, want the 2 pods' only: %v", len(got), got)
	}
}
