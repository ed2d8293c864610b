package nettest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// EchoTCP listens on addr inside ns and echoes every connection until the
// test ends.
func EchoTCP(t testing.TB, ns *NS, addr string) {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatalf("nettest: listen on %s in netns %s: %v", addr, ns.Name(), err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				io.Copy(conn, conn)
			}()
		}
	}()
}

// TCPRoundTrip connects from ns to addr, sends size bytes and reads them
// back within timeout.
func TCPRoundTrip(ns *NS, addr string, size int, timeout time.Duration) error {
	var conn net.Conn
	if err := ns.Do(func() (err error) { conn, err = net.DialTimeout("tcp", addr, timeout); return err }); err != nil {
		return fmt.Errorf("dial %s from netns %s: %w", addr, ns.Name(), err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	msg := bytes.Repeat([]byte("0123456789"), size/10+1)[:size]
	werr := make(chan error, 1)
	go func() { _, err := conn.Write(msg); werr <- err }()
	got := make([]byte, size)
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("echo through %s: %w", addr, err)
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("write to %s: %w", addr, err)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo through %s: the bytes came back changed", addr)
	}
	return nil
}
