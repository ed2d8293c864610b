package ebpf

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestTCReusedSourcePort: a client that connects through a NodePort from a
// fixed source port, aborts the connection (SO_LINGER 0: a reset, no
// TIME_WAIT on its side) and connects again from the same port at once.
// The new SYN's tuple is that of the finished flow, whose conntrack entry
// (CLOSE, with the NAT) is still there; the kernel would kill it and track
// the SYN as a new flow without NAT, which the node refuses. Every
// connection must reach a backend, the DNAT-only one and the SNATed one.
func TestTCReusedSourcePort(t *testing.T) {
	k := newTCEnv(t)
	k.StartProxy(t)
	addr := nodePortOf(proxytest.NodeIP, k.tcpNodePort(t, "np-reuse"))
	const rounds, port = 40, 40000
	seen := map[string]int{}
	for i := range rounds {
		backend, err := k.dialFromPortOnceFree(addr, port)
		if err != nil {
			t.Fatalf("connection %d of %d from the reused port %d: %v (backends so far %v); the node's TCP entries:\n%s",
				i+1, rounds, port, err, seen, k.conntrackTCP())
		}
		seen[backend]++
	}
	if len(seen) != 2 {
		t.Fatalf("%d connections reached %v, want both endpoints", rounds, seen)
	}
	t.Logf("%d connections from one source port: %v", rounds, seen)
}

// conntrackTCP lists the node's TCP conntrack entries (conntrack -L), for
// a failure's message: whether the reused port's entry is still there.
func (k *tcEnv) conntrackTCP() string {
	var out []byte
	err := k.Node.Do(func() error {
		var err error
		out, err = exec.Command("conntrack", "-L", "-p", "tcp").CombinedOutput()
		return err
	})
	if err != nil {
		return fmt.Sprintf("conntrack -L: %v: %s", err, out)
	}
	return string(out)
}

// tcpNodePort creates a TCP NodePort service with pod1 (local) and pod2
// (remote, SNAT) as endpoints and waits until it answers on the node.
func (k *tcEnv) tcpNodePort(t *testing.T, name string) *v1.Service {
	t.Helper()
	svc := k.CreateService(t, nodePortService(name, v1.ProtocolTCP, proxytest.TCPPort))
	k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1, proxytest.Pod2)
	addr := nodePortOf(proxytest.NodeIP, svc)
	proxytest.Eventually(t, wait, "NodePort "+addr, func() error {
		_, err := proxytest.DialTCP(k.Client, addr, time.Second)
		return err
	})
	return svc
}

// dialFromPortOnceFree is dialFromPort, waiting out EADDRNOTAVAIL: the
// client's own kernel still holding the previous connection on the port.
// That happens when a fork elsewhere in this process (the proxy runs
// tools) copied the previous socket's descriptor just before it was closed:
// the socket lives on, established, until the child execs. The node's
// handling of the reused tuple, the subject here, starts only once the SYN
// leaves, so the wait is bounded and anything else fails at once.
func (k *tcEnv) dialFromPortOnceFree(addr string, port int) (string, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		backend, err := k.dialFromPort(addr, port)
		if !errors.Is(err, syscall.EADDRNOTAVAIL) || time.Now().After(deadline) {
			return backend, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialFromPort connects from the client's address and port to addr, reads
// the greeting and aborts the connection with a reset.
func (k *tcEnv) dialFromPort(addr string, port int) (string, error) {
	var backend string
	err := k.Client.Do(func() error {
		d := net.Dialer{
			Timeout:   time.Second,
			LocalAddr: &net.TCPAddr{IP: net.ParseIP(proxytest.ClientIP), Port: port},
			Control:   nettest.ReuseAddr,
		}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		tc := c.(*net.TCPConn)
		defer tc.Close()
		// Close sends a reset: no TIME_WAIT keeps the port from the next
		// connection.
		if err := tc.SetLinger(0); err != nil {
			return fmt.Errorf("linger: %w", err)
		}
		buf := make([]byte, 64)
		_ = tc.SetReadDeadline(time.Now().Add(time.Second))
		n, err := tc.Read(buf)
		if err != nil {
			return fmt.Errorf("read greeting: %w", err)
		}
		backend, _, _ = strings.Cut(string(buf[:n]), " ")
		return nil
	})
	return backend, err
}
