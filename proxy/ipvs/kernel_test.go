package ipvs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestKernelSuite is the shared real-kernel suite (through the API
// server, IPv4, IPv6 and dual-stack) for the ipvs mode, inside the VM.
func TestKernelSuite(t *testing.T) {
	requireGuest(t)
	// A data plane built in a subtest (RestartKeepsTraffic's restart)
	// runs on into the next ones, so its handle is closed with the suite,
	// not with that subtest: closed early, its socket's number was reused
	// by an HTTP connection the Metrics case scraped through.
	top := t
	proxytest.KernelSuite(t, func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
		h, err := Open(node.Path())
		if err != nil {
			t.Fatal(err)
		}
		top.Cleanup(func() { h.Close() })
		return New(f, h, NetHost{Netns: node.Path()}, Config{}, testapi.Logger())
	})
}

// serve answers every TCP connection on :8080 in ns with name, then keeps
// it open until the client closes it.
func serve(t *testing.T, ns *nettest.NS, name string) {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() (err error) { l, err = net.Listen("tcp", ":8080"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, name+"\n")
				io.Copy(io.Discard, c)
			}()
		}
	}()
}

// dial connects from ns to addr and reads who answered; the connection
// stays open for the caller.
func dial(ns *nettest.NS, addr string) (string, net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) { c, err = net.DialTimeout("tcp", addr, 3*time.Second); return err })
	if err != nil {
		return "", nil, err
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b := make([]byte, 16)
	n, err := c.Read(b)
	if err != nil {
		c.Close()
		return "", nil, err
	}
	return string(b[:n-1]), c, nil
}

// TestKernelTraffic drives the proxier directly (no API server, so it is
// quick under TCG): ClusterIP over both endpoints, refusal without
// endpoints, graceful termination keeping an open connection, and a
// Cleanup that leaves nothing.
func TestKernelTraffic(t *testing.T) {
	requireGuest(t)
	node, pod1, pod2 := nettest.New(t), nettest.New(t), nettest.New(t)
	nettest.Link(t, node, "p1", "10.244.1.1/24", pod1, "eth0", "10.244.1.2/24")
	nettest.Link(t, node, "p2", "10.244.2.1/24", pod2, "eth0", "10.244.2.2/24")
	pod1.MustExec(t, "ip", "route", "add", "default", "via", "10.244.1.1")
	pod2.MustExec(t, "ip", "route", "add", "default", "via", "10.244.2.1")
	serve(t, pod1, "pod1")
	serve(t, pod2, "pod2")
	h, err := Open(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	p := New(proxy.IPv4, h, NetHost{Netns: node.Path()}, Config{Timeouts: Timeouts{UDP: 30 * time.Second}}, testapi.Logger())
	ctx := context.Background()
	both := proxytest.Snapshot(proxy.IPv4,
		webPort(proxytest.WithEndpoints(8080, "10.244.1.2", "10.244.2.2")),
		proxytest.Port("default", "empty", "10.96.0.11", 80, proxy.TCP))
	if _, err := p.Sync(ctx, both, proxytest.Full); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range 4 {
		who, c, err := dial(node, "10.96.0.10:80")
		if err != nil {
			t.Fatalf("ClusterIP: %v", err)
		}
		c.Close()
		seen[who]++
	}
	if seen["pod1"] == 0 || seen["pod2"] == 0 {
		t.Fatalf("rr over two endpoints answered %v", seen)
	}
	if _, _, err := dial(node, "10.96.0.11:80"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("service without endpoints: %v, want connection refused", err)
	}
	if to, err := h.Timeouts(); err != nil || to.UDP != 30*time.Second {
		t.Fatalf("timeouts %+v %v", to, err)
	}

	// Graceful termination: open a connection to pod2, remove pod2.
	var open net.Conn
	for open == nil {
		who, c, err := dial(node, "10.96.0.10:80")
		if err != nil {
			t.Fatal(err)
		}
		if who == "pod2" {
			open = c
		} else {
			c.Close()
		}
	}
	defer open.Close()
	one := proxytest.Snapshot(proxy.IPv4, webPort(proxytest.WithEndpoints(8080, "10.244.1.2")),
		proxytest.Port("default", "empty", "10.96.0.11", 80, proxy.TCP))
	if _, err := p.Sync(ctx, one, proxytest.Changed(web)); err != nil {
		t.Fatal(err)
	}
	ds, err := h.Destinations(webKey)
	if err != nil || len(ds) != 2 {
		t.Fatalf("destinations while draining: %+v %v", ds, err)
	}
	for _, d := range ds {
		if d.Port == 8080 && d.Addr.String() == "10.244.2.2" && (d.Weight != 0 || d.ActiveConns == 0) {
			t.Fatalf("draining endpoint %+v: want weight 0 with its connection", d)
		}
	}
	if _, err := open.Write([]byte("still there\n")); err != nil {
		t.Fatalf("open connection to the removed endpoint: %v", err)
	}
	for range 3 {
		who, c, err := dial(node, "10.96.0.10:80")
		if err != nil || who != "pod1" {
			t.Fatalf("new connection while pod2 drains: %q %v", who, err)
		}
		c.Close()
	}

	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(ctx, h, NetHost{Netns: node.Path()}); left != "" {
		t.Fatalf("cleanup left: %s", left)
	}
}

// leftovers describes the ipvs mode's state left in a namespace.
func leftovers(ctx context.Context, h Handle, host NetHost) string {
	var left []string
	if s, _ := h.Services(); len(s) > 0 {
		left = append(left, fmt.Sprint("virtual servers ", s))
	}
	if ok, _ := host.DeviceExists(); ok {
		left = append(left, "device "+DeviceName)
	}
	for _, fam := range []string{"ip", "ip6"} {
		if ok, _ := host.NftTableExists(ctx, fam, TableName); ok {
			left = append(left, "table "+fam+" "+TableName)
		}
	}
	return strings.Join(left, "; ")
}
