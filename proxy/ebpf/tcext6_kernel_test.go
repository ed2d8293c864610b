package ebpf

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// dstOpts is an IPv6 destination-options header holding one PadN option
// (8 bytes; the kernel fills in the next-header byte). Set on a socket
// (IPV6_DSTOPTS), it goes in front of the TCP/UDP header of every packet
// the socket sends.
var dstOpts = string([]byte{0, 0, 1, 4, 0, 0, 0, 0})

// dialDstOpts connects from ns with dstOpts on the socket.
func dialDstOpts(ns *nettest.NS, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_IPV6, unix.IPV6_DSTOPTS, dstOpts)
		})
		return errors.Join(err, serr)
	}}
	var c net.Conn
	err := ns.Do(func() error {
		var err error
		c, err = d.Dial(network, addr)
		return err
	})
	return c, err
}

// TestTCIPv6ExtensionHeaders: a client whose every packet carries a
// destination-options header reaches an IPv6 NodePort on the tc path
// (TCP, with an established flow carrying data both ways, and UDP): the
// program walks the header to the ports and the kernel's NAT translates
// with it in place. A refused TCP connect is reset at once (the reset
// carries no extension header), a refused UDP datagram answered with a
// port unreachable the client's socket gets. An nft counter in the node proves the
// headers were there.
func TestTCIPv6ExtensionHeaders(t *testing.T) {
	k := newTCEnv(t, "c0")
	k.Node.MustExec(t, "nft", "add table ip6 exthdr-seen\n"+
		"add chain ip6 exthdr-seen pre { type filter hook prerouting priority -400; }\n"+
		"add rule ip6 exthdr-seen pre exthdr dst exists counter\n")
	dp := k.dataPlane(proxy.IPv6)
	t.Cleanup(dp.Close)
	const refusedIP = "fd00:70::9"
	snap := proxytest.Snapshot(proxy.IPv6,
		proxytest.Port("ns", "np6", "fd00:96::91", 80, proxy.TCP, proxytest.WithNodePort(wildNodePort),
			proxytest.WithEndpoints(proxytest.TCPPort, proxytest.Pod2IP6)),
		proxytest.Port("ns", "np6u", "fd00:96::91", 53, proxy.UDP, proxytest.WithNodePort(wildNodePort),
			proxytest.WithEndpoints(proxytest.UDPPort, proxytest.Pod2IP6)),
		proxytest.Port("ns", "empty6", "fd00:96::92", proxytest.TCPPort, proxy.TCP, proxytest.WithExternalIPs(refusedIP)),
		proxytest.Port("ns", "empty6u", "fd00:96::92", proxytest.UDPPort, proxy.UDP, proxytest.WithExternalIPs(refusedIP)))
	snap.Node.IPs = []netip.Addr{netip.MustParseAddr(proxytest.NodeIP6)}
	if _, err := dp.Sync(t.Context(), snap, proxytest.Full); err != nil {
		t.Fatal(err)
	}
	addr := wildAddr(proxytest.NodeIP6)

	var conn net.Conn
	var rd *bufio.Reader
	proxytest.Eventually(t, wait, "TCP NodePort with a destination-options header", func() error {
		c, err := dialDstOpts(k.Client, "tcp", addr)
		if err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		r := bufio.NewReader(c)
		line, err := r.ReadString('\n')
		if err != nil {
			c.Close()
			return fmt.Errorf("greeting: %w", err)
		}
		if f := strings.Fields(line); len(f) != 2 || f[0] != "pod2" || !strings.HasPrefix(f[1], "["+proxytest.Pod2GatewayIP6+"]:") {
			c.Close()
			return fmt.Errorf("greeting %q, want pod2 seeing the node", line)
		}
		conn, rd = c, r
		return nil
	})
	defer conn.Close()
	// Data both ways on the established flow, every client packet with the
	// header.
	for i := range 3 {
		msg := "ping" + strconv.Itoa(i) + "\n"
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if got, err := rd.ReadString('\n'); err != nil || got != msg {
			t.Fatalf("echo %d: %q, %v", i, got, err)
		}
	}

	proxytest.Eventually(t, wait, "UDP NodePort with a destination-options header", func() error {
		return udpAnsweredBy(func() (net.Conn, error) { return dialDstOpts(k.Client, "udp", addr) }, "pod2", proxytest.Pod2GatewayIP6)
	})

	start := time.Now()
	_, err := dialDstOpts(k.Client, "tcp", net.JoinHostPort(refusedIP, strconv.Itoa(proxytest.TCPPort)))
	if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > time.Second {
		t.Errorf("TCP to an entry point without endpoints, with the header: %v after %v, want refused at once", err, time.Since(start))
	}
	// The port unreachable quotes the header and the UDP header behind it,
	// so the client's kernel finds the socket and reports the refusal.
	uc, err := dialDstOpts(k.Client, "udp", net.JoinHostPort(refusedIP, strconv.Itoa(proxytest.UDPPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	if _, err := proxytest.AskUDP(uc, 3*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("UDP to an entry point without endpoints, with the header: %v, want refused (port unreachable)", err)
	}

	out := string(k.Node.MustExec(t, "nft", "list", "table", "ip6", "exthdr-seen"))
	if strings.Contains(out, "packets 0 ") || !strings.Contains(out, "counter packets") {
		t.Errorf("no packet with a destination-options header reached the node:\n%s", out)
	}
}
