package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// dialIn opens a TCP connection from inside the named namespace: the
// socket is created on a thread switched into it and keeps working after
// the thread switches back.
func dialIn(netns, addr string) (net.Conn, error) {
	var c net.Conn
	err := netnsutil.Do(netnsutil.Path(netns), func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 500*time.Millisecond)
		return err
	})
	return c, err
}

// httpOK is whether GET path on addr, from inside netns, answers 200.
func httpOK(netns, addr, path string) bool {
	c, err := dialIn(netns, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		return false
	}
	status, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.Contains(status, " 200 ")
}

// listening is whether addr accepts a connection from inside netns.
func listening(netns, addr string) bool {
	c, err := dialIn(netns, addr)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// apiReady is whether the API server answers /readyz.
func apiReady(ctx context.Context, cs kubernetes.Interface) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(cctx)
	return err == nil
}

// run runs a command and returns its output; the error carries the output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// waitFor polls ok every 50 ms until it holds or timeout passes, and
// returns when it first held (zero time on timeout).
func waitFor(ctx context.Context, timeout time.Duration, ok func() bool) time.Time {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if ok() {
			return time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Time{}
}
