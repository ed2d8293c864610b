package ebpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// Addresses of the node's second NIC (n1, a veth whose peer stays in the
// node namespace), which the Node object does not list.
const (
	secondNICAddr  = "192.168.56.1"
	addedLaterAddr = "192.168.57.1"
	secondNICAddr6 = "fd00:56::1"
	wildNodePort   = 30090
)

// addSecondNIC gives the node namespace a second interface holding
// secondNICAddr (and secondNICAddr6).
func addSecondNIC(t *testing.T, node *nettest.NS) {
	t.Helper()
	node.MustExec(t, "ip", "link", "add", "n1", "type", "veth", "peer", "name", "n1p")
	node.MustExec(t, "ip", "link", "set", "n1", "up")
	node.MustExec(t, "ip", "link", "set", "n1p", "up")
	node.MustExec(t, "ip", "addr", "add", secondNICAddr+"/24", "dev", "n1")
	node.MustExec(t, "ip", "-6", "addr", "add", secondNICAddr6+"/64", "dev", "n1", "nodad")
}

// syncNodePort programs one NodePort Service (pod2 behind it) straight into
// dp, with no proxy core: the test knows every sync there is.
func syncNodePort(t *testing.T, dp *DataPlane, f proxy.Family, nodePorts proxy.NodePorts) {
	t.Helper()
	cip, ep := "10.96.0.90", proxytest.Pod2IP
	if f == proxy.IPv6 {
		cip, ep = "fd00:96::90", proxytest.Pod2IP6
	}
	snap := proxytest.Snapshot(f, proxytest.Port("ns", "wild", cip, 80, proxy.TCP, proxytest.WithNodePort(wildNodePort),
		proxytest.WithEndpoints(proxytest.TCPPort, ep)))
	snap.Node.IPs = []netip.Addr{netip.MustParseAddr(proxytest.NodeIP), netip.MustParseAddr(proxytest.NodeIP6)}
	snap.NodePorts = nodePorts
	if _, err := dp.Sync(t.Context(), snap, proxytest.Full); err != nil {
		t.Fatal(err)
	}
}

func wildAddr(host string) string { return net.JoinHostPort(host, fmt.Sprint(wildNodePort)) }

// notServed checks that a dial to addr from the client reaches no backend
// (the node forwards it back towards the client, which drops it).
func notServed(ns *nettest.NS, addr string) error {
	r, err := proxytest.DialTCP(ns, addr, 300*time.Millisecond)
	if err == nil {
		return fmt.Errorf("answered by %s", r.Backend)
	}
	return nil
}

// localAddrsHold reports whether the pinned local_addrs map of pinDir holds a.
func localAddrsHold(pinDir string, f proxy.Family, a string) (bool, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, socklbMapLocalAddrs), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return false, err
	}
	defer m.Close()
	var v uint8
	err = m.Lookup(localAddr{Addr: addrWords(netip.MustParseAddr(a))}, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, nil
	}
	return err == nil, err
}

// TestWildcardNodePortTC: without --nodeport-addresses, the tc path serves
// a NodePort on every local address of the node namespace: one the Node
// object does not list, one added after the last sync (within a second,
// no sync in between), and stops on one removed; --nodeport-addresses
// still restricts it to the listed address (no wildcard entry).
func TestWildcardNodePortTC(t *testing.T) {
	k := newTCEnv(t, "c0")
	addSecondNIC(t, k.Node)
	dp4, dp6 := k.dataPlane(proxy.IPv4), k.dataPlane(proxy.IPv6)
	t.Cleanup(dp4.Close)
	t.Cleanup(dp6.Close)
	syncNodePort(t, dp4, proxy.IPv4, proxy.NodePorts{All: true})
	syncNodePort(t, dp6, proxy.IPv6, proxy.NodePorts{All: true})

	for _, host := range []string{proxytest.NodeIP, secondNICAddr} {
		proxytest.Eventually(t, wait, "NodePort on "+host, func() error {
			return k.answeredBy(wildAddr(host), "pod2", proxytest.Pod2GatewayIP)
		})
	}
	proxytest.Eventually(t, wait, "NodePort on "+secondNICAddr6, func() error {
		return k.answeredBy(wildAddr(secondNICAddr6), "pod2", proxytest.Pod2GatewayIP6)
	})
	// The loopback is not a NodePort address (as in the nftables mode).
	if ok, err := localAddrsHold(dp4.PinDir(), proxy.IPv4, "127.0.0.1"); ok || err != nil {
		t.Errorf("local_addrs holds 127.0.0.1: %v, %v", ok, err)
	}

	k.Node.MustExec(t, "ip", "addr", "add", addedLaterAddr+"/32", "dev", "n1")
	start := time.Now()
	proxytest.Eventually(t, time.Second, "NodePort on the address added after the sync", func() error {
		return k.answeredBy(wildAddr(addedLaterAddr), "pod2", proxytest.Pod2GatewayIP)
	})
	t.Logf("address added → NodePort served after %v, no sync", time.Since(start))

	k.Node.MustExec(t, "ip", "addr", "del", addedLaterAddr+"/32", "dev", "n1")
	proxytest.Eventually(t, time.Second, "removed address leaves local_addrs", func() error {
		if ok, err := localAddrsHold(dp4.PinDir(), proxy.IPv4, addedLaterAddr); ok || err != nil {
			return fmt.Errorf("still held (%v)", err)
		}
		return nil
	})
	if err := notServed(k.Client, wildAddr(addedLaterAddr)); err != nil {
		t.Errorf("NodePort on the removed address: %v", err)
	}

	// --nodeport-addresses: the listed address only.
	syncNodePort(t, dp4, proxy.IPv4, proxy.NodePorts{Addrs: []netip.Addr{netip.MustParseAddr(proxytest.NodeIP)}})
	if table, err := dp4.Dump(); err != nil || strings.Contains(table, "*:") {
		t.Errorf("restricted NodePorts still have a wildcard entry: %v\n%s", err, table)
	}
	if err := k.answeredBy(wildAddr(proxytest.NodeIP), "pod2", proxytest.Pod2GatewayIP); err != nil {
		t.Errorf("NodePort on the listed address: %v", err)
	}
	if err := notServed(k.Client, wildAddr(secondNICAddr)); err != nil {
		t.Errorf("NodePort on an address outside --nodeport-addresses: %v", err)
	}
}

// TestWildcardNodePortSocketLB: socket LB (the client's sockets are in the
// cgroup) serves a NodePort on an address of the node namespace that the
// Node object does not list, and on one added after the sync.
func TestWildcardNodePortSocketLB(t *testing.T) {
	k := newKernelEnv(t)
	addSecondNIC(t, k.Node)
	dp := k.dataPlane(proxy.IPv4)
	t.Cleanup(dp.Close)
	syncNodePort(t, dp, proxy.IPv4, proxy.NodePorts{All: true})
	answered := func(host string) func() error {
		return func() error {
			r, err := proxytest.DialTCP(k.Client, wildAddr(host), 300*time.Millisecond)
			if err == nil && r.Backend != "pod2" {
				err = fmt.Errorf("answered by %s", r.Backend)
			}
			return err
		}
	}
	proxytest.Eventually(t, wait, "NodePort on "+secondNICAddr, answered(secondNICAddr))
	k.Node.MustExec(t, "ip", "addr", "add", addedLaterAddr+"/32", "dev", "n1")
	proxytest.Eventually(t, time.Second, "NodePort on the address added after the sync", answered(addedLaterAddr))
}
