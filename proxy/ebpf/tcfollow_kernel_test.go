package ebpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// The node's second external link, c1, towards client2.
const (
	c1NodeAddr = "192.168.58.1"
	client2IP  = "192.168.58.2"
)

// tcxPrograms counts the programs on ifName's TCX ingress in ns; a missing
// link counts none.
func tcxPrograms(ns *nettest.NS, ifName string) (int, error) {
	n := 0
	err := ns.Do(func() error {
		l, err := netlink.LinkByName(ifName)
		if errors.As(err, &netlink.LinkNotFoundError{}) {
			return nil
		}
		if err != nil {
			return err
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		n = len(res.Programs)
		return nil
	})
	return n, err
}

// TestTCInterfacesFollowTheNode: with --bpf-tc-interfaces=auto
// (FollowNode) a second link of the node that gains a node address gets
// the tc program without a restart and translates a NodePort for a client
// behind it; losing the address detaches and unpins it; a repair after a
// lost pin attaches where the node is now; and the link going away is
// detached too. Each change is counted.
func TestTCInterfacesFollowTheNode(t *testing.T) {
	k := newTCEnv(t, "c0")
	client2 := nettest.New(t)
	nettest.Link(t, k.Node, "c1", "", client2, "eth0", client2IP+"/24")
	client2.MustExec(t, "ip", "route", "add", "default", "via", c1NodeAddr)
	dp := New(Config{Family: proxy.IPv4, Cgroup: k.cgroup, PinDir: filepath.Join(k.pins, familyDir(proxy.IPv4)),
		Log: testapi.Logger(), Interfaces: []string{"c0"}, NetNS: k.Node.Path(),
		FollowNode: &NodeAddrChoice{NodeAddrs: []netip.Addr{netip.MustParseAddr(proxytest.NodeIP), netip.MustParseAddr(c1NodeAddr)}}})
	t.Cleanup(dp.Close)
	syncNodePort(t, dp, proxy.IPv4, proxy.NodePorts{All: true})
	pin := dp.tcLinkPin("c1")
	attached := func(want int) func() error {
		return func() error {
			n, err := tcxPrograms(k.Node, "c1")
			if err != nil {
				return err
			}
			if _, perr := os.Stat(pin); n != want || (want == 1) != (perr == nil) {
				return fmt.Errorf("%d programs on c1 (want %d), pin: %v", n, want, perr)
			}
			return nil
		}
	}
	if err := attached(0)(); err != nil {
		t.Fatalf("c1 without a node address: %v", err)
	}
	addr := net.JoinHostPort(c1NodeAddr, fmt.Sprint(wildNodePort))

	k.Node.MustExec(t, "ip", "addr", "add", c1NodeAddr+"/24", "dev", "c1")
	proxytest.Eventually(t, time.Second, "c1 attached once it holds a node address", attached(1))
	// Its address is the SNAT source the program falls back to where the
	// FIB has no route toward a backend.
	if got, err := snatAddrOf(k.Node, dp.PinDir(), "c1"); err != nil || got != netip.MustParseAddr(c1NodeAddr) {
		t.Errorf("snat_addrs for c1: %v, %v; want %s", got, err, c1NodeAddr)
	}
	// SNATed to the node's address toward pod2 (the route's preferred
	// source, as MASQUERADE picks it), whichever interface it came in by.
	proxytest.Eventually(t, wait, "NodePort through c1", func() error {
		r, err := proxytest.DialTCP(client2, addr, time.Second)
		if err != nil {
			return err
		}
		if host, _, _ := net.SplitHostPort(r.Peer); r.Backend != "pod2" || host != proxytest.Pod2GatewayIP {
			return fmt.Errorf("answered by %s seeing %s", r.Backend, r.Peer)
		}
		return nil
	})
	if got := dp.tcChanges.attached.Load(); got != 1 {
		t.Errorf("attached changes = %d, want 1", got)
	}
	if ifs := dp.tcInterfaces(); len(ifs) != 2 {
		t.Errorf("tc interfaces %v, want c0 and c1", ifs)
	}

	k.Node.MustExec(t, "ip", "addr", "del", c1NodeAddr+"/24", "dev", "c1")
	proxytest.Eventually(t, time.Second, "c1 detached once its node address is gone", attached(0))

	k.Node.MustExec(t, "ip", "addr", "add", c1NodeAddr+"/24", "dev", "c1")
	proxytest.Eventually(t, time.Second, "c1 attached again", attached(1))
	// A lost pin: Intact notices, and the repair's reload attaches where
	// the node is now (c1 too), not the choice at start (c0).
	if err := os.Remove(pin); err != nil {
		t.Fatal(err)
	}
	if ok, err := dp.Intact(t.Context()); ok || err != nil {
		t.Fatalf("c1's pin gone: intact %v, %v", ok, err)
	}
	syncNodePort(t, dp, proxy.IPv4, proxy.NodePorts{All: true})
	proxytest.Eventually(t, time.Second, "c1 attached by the repair", attached(1))
	k.Node.MustExec(t, "ip", "link", "del", "c1")
	proxytest.Eventually(t, time.Second, "c1's pin gone with the link", attached(0))
	if a, d := dp.tcChanges.attached.Load(), dp.tcChanges.detached.Load(); a != 2 || d != 2 {
		t.Errorf("changes attached %d detached %d, want 2 and 2", a, d)
	}
	// c0, configured at start and still holding NodeIP, stays.
	if n, err := tcxPrograms(k.Node, "c0"); n != 1 || err != nil {
		t.Errorf("c0: %d programs, %v", n, err)
	}
	if ok, err := dp.Intact(t.Context()); !ok || err != nil {
		t.Errorf("intact %v, %v after the changes", ok, err)
	}
}

// snatAddrOf reads the tc program's fallback SNAT address for ifName (an
// interface of ns) from the pinned snat_addrs map.
func snatAddrOf(ns *nettest.NS, pinDir, ifName string) (netip.Addr, error) {
	var idx uint32
	if err := ns.Do(func() error {
		ifc, err := net.InterfaceByName(ifName)
		if err == nil {
			idx = uint32(ifc.Index)
		}
		return err
	}); err != nil {
		return netip.Addr{}, err
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, tcnatMapSnatAddrs), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return netip.Addr{}, err
	}
	defer m.Close()
	var v addrPort
	if err := m.Lookup(&idx, &v); err != nil {
		return netip.Addr{}, err
	}
	return wordsAddr(v.Addr, proxy.IPv4), nil
}
