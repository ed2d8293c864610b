package nettest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// ForwardLoopback makes addr (a TCP address on the root namespace's
// loopback, where test API servers listen) reachable at the same address
// inside ns, for as long as the test runs. Upstream binaries started in ns
// with an unmodified kubeconfig then reach the server without the test
// touching any root-namespace address or route.
func ForwardLoopback(t testing.TB, ns *NS, addr string) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns.Name(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { pipe(ctx, in, addr) })
		}
	})
}

func pipe(ctx context.Context, in net.Conn, addr string) {
	defer in.Close()
	var d net.Dialer
	out, err := d.DialContext(ctx, "tcp", addr) // from a root-namespace thread
	if err != nil {
		return
	}
	defer out.Close()
	stop := context.AfterFunc(ctx, func() { in.Close(); out.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok && !errors.Is(err, net.ErrClosed) {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	<-done
}
