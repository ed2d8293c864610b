package ebpf

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestTCRestartUnderLoad: the proxy is restarted three times while
// clients from another host keep opening TCP connections and asking UDP
// questions through a NodePort whose endpoints are on this node (DNAT
// only) and on another one (DNAT + SNAT, the reverse translation found in
// the connection-tracking map), and while 20 connections opened before
// the first restart carry a message every 50 ms. Nothing may fail: no new
// connection, no UDP answer, no established connection.
func TestTCRestartUnderLoad(t *testing.T) {
	k := newTCEnv(t)
	k.StartProxy(t)
	tcpSvc := k.tcpNodePort(t, "np-load")
	udpSvc := k.CreateService(t, nodePortService("np-load-udp", v1.ProtocolUDP, proxytest.UDPPort))
	k.SetEndpoints(t, udpSvc, proxytest.UDPPort, proxytest.Pod1, proxytest.Pod2)
	tcpAddr, udpAddr := nodePortOf(proxytest.NodeIP, tcpSvc), nodePortOf(proxytest.NodeIP, udpSvc)
	proxytest.Eventually(t, wait, "the UDP NodePort answers", func() error {
		c, err := proxytest.DialUDP(k.Client, udpAddr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = proxytest.AskUDP(c, time.Second)
		return err
	})

	// Established connections, to both endpoints.
	var long []*echoConn
	seen := map[string]int{}
	for len(long) < 20 {
		c := k.dialEcho(t, tcpAddr)
		long = append(long, c)
		seen[c.backend]++
	}
	if len(seen) != 2 {
		t.Fatalf("established connections reached %v, want both endpoints", seen)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var attempts, failures atomic.Int64
	var firstErr atomic.Value
	fail := func(what string, err error) {
		failures.Add(1)
		firstErr.CompareAndSwap(nil, fmt.Errorf("%s at %s: %w", what, time.Now().Format("15:04:05.000"), err))
	}
	load := func(what string, try func() error) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			attempts.Add(1)
			if err := try(); err != nil {
				fail(what, err)
			}
		}
	}
	wg.Add(4)
	for range 2 {
		go load("new TCP connection", func() error {
			_, err := proxytest.DialTCP(k.Client, tcpAddr, 2*time.Second)
			return err
		})
	}
	go load("UDP question", func() error {
		// A new socket each time: a new 5-tuple for the program to
		// translate, not one the connection-tracking map already holds.
		c, err := proxytest.DialUDP(k.Client, udpAddr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = proxytest.AskUDP(c, 2*time.Second)
		return err
	})
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for i, c := range long {
				if err := c.roundTrip(); err != nil {
					fail(fmt.Sprintf("established connection %d", i), err)
				}
			}
		}
	}()

	var restarts []string
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		restarts = append(restarts, time.Now().Format("15:04:05.000"))
		k.StopProxy()
		time.Sleep(200 * time.Millisecond) // no proxy at all for a moment
		p := k.StartProxy(t)
		waitSynced(t, p)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d operations failed across 3 restarts (stopped at %v); first: %v", n, attempts.Load(), restarts, firstErr.Load())
	}
	if attempts.Load() < 30 {
		t.Fatalf("only %d operations across the restarts: the load did not run", attempts.Load())
	}
	t.Logf("%d new connections and UDP questions, 20 established connections (%v) every 50 ms, across 3 restarts: none failed",
		attempts.Load(), seen)
}

// echoConn is an established connection to proxytest's TCP server, which
// greets with its name and then echoes lines.
type echoConn struct {
	conn    net.Conn
	r       *bufio.Reader
	backend string
}

// dialEcho connects from the client and reads the greeting.
func (k *tcEnv) dialEcho(t *testing.T, addr string) *echoConn {
	t.Helper()
	var conn net.Conn
	if err := k.Client.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &echoConn{conn: conn, r: bufio.NewReader(conn)}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("greeting from %s: %v", addr, err)
	}
	c.backend, _, _ = strings.Cut(line, " ")
	return c
}

// roundTrip sends a line and reads its echo within a second.
func (c *echoConn) roundTrip() error {
	_ = c.conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.conn.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return fmt.Errorf("echo %q", line)
	}
	return nil
}

// waitSynced waits for p's first successful sync.
func waitSynced(t *testing.T, p *proxy.Proxy) {
	t.Helper()
	select {
	case <-p.Synced():
	case <-time.After(wait):
		t.Fatalf("no first sync within %v", wait)
	}
}
