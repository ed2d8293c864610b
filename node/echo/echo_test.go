package echo

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"
)

// freePort asks the kernel for a free port on loopback and releases it.
// Another process may take it before the server binds it; the caller then
// sees the server fail to listen and tries another.
func freePort(t *testing.T, network string) int {
	t.Helper()
	switch network {
	case "udp":
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		return pc.LocalAddr().(*net.UDPAddr).Port
	default:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
}

// TestEchoServerAndClient runs the echo server on free loopback ports and
// talks to each of its three listeners through the client.
func TestEchoServerAndClient(t *testing.T) {
	for attempt := 1; ; attempt++ {
		tcp, udp, web := freePort(t, "tcp"), freePort(t, "udp"), freePort(t, "tcp")
		err := echoRoundTrip(t, tcp, udp, web)
		if err == nil {
			return
		}
		if attempt == 3 {
			t.Fatalf("echo server could not listen three times: %v", err)
		}
		t.Logf("attempt %d: %v; trying other ports", attempt, err)
	}
}

// echoRoundTrip returns the server's error if it could not listen (a port
// was taken meanwhile); anything else is checked here.
func echoRoundTrip(t *testing.T, tcp, udp, web int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- Run(ctx, Options{Name: "pod-a", TCPAddr: fmt.Sprintf("127.0.0.1:%d", tcp),
			UDPAddr: fmt.Sprintf("127.0.0.1:%d", udp), HTTPAddr: fmt.Sprintf("127.0.0.1:%d", web)})
	}()
	want := map[string]string{
		fmt.Sprintf("tcp://127.0.0.1:%d", tcp):   "pod-a: hi",
		fmt.Sprintf("udp://127.0.0.1:%d", udp):   "pod-a: hi",
		fmt.Sprintf("http://127.0.0.1:%d/", web): "pod-a",
	}
	for target, w := range want {
		var got string
		var err error
		for range 50 {
			select {
			case err := <-served:
				return fmt.Errorf("echo server stopped: %w", err)
			default:
			}
			if got, err = Client(ctx, target, "hi", time.Second); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got != w {
			t.Errorf("%s: got %q, %v; want %q", target, got, err, w)
		}
	}
	return nil
}
