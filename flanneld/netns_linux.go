package flanneld

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/nodenet/nodenet/routes"
)

// Netns is the network namespace the daemon programs: "" is its own (the
// DaemonSet case, no thread switching at all), otherwise an iproute2 name
// or a path such as /proc/1234/ns/net. The same daemon code thus serves a
// real host and a node namespace of a local cluster or a test.
type Netns string

// String is for logs.
func (n Netns) String() string {
	if n == "" {
		return "(own)"
	}
	return string(n)
}

// Handle opens an rtnetlink handle in the namespace.
func (n Netns) Handle() (*netlink.Handle, error) { return routes.OpenHandle(string(n)) }

// Do runs fn on an OS thread inside the namespace. Sockets fn opens stay in
// the namespace; processes it starts inherit it. If the thread cannot be
// switched back, it is retired rather than reused.
func (n Netns) Do(fn func() error) error {
	if n == "" {
		return fn()
	}
	target, err := n.open()
	if err != nil {
		return err
	}
	defer target.Close()
	return onSwitchedThread(func() error {
		if err := netns.Set(target); err != nil {
			return fmt.Errorf("enter netns %s: %w", n, err)
		}
		return nil
	}, fn)
}

// onSwitchedThread runs fn on a locked OS thread that enter has moved into
// another network namespace, and moves the thread back afterwards. If
// enter fails, the thread is still where it was. If the thread cannot be
// switched back, it is retired rather than reused.
func onSwitchedThread(enter, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := enter(); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			done <- errors.Join(ferr, fmt.Errorf("restore netns (thread retired): %w", err))
			return // still locked: the runtime retires the thread
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

func (n Netns) open() (netns.NsHandle, error) {
	var (
		h   netns.NsHandle
		err error
	)
	if strings.Contains(string(n), "/") {
		h, err = netns.GetFromPath(string(n))
	} else {
		h, err = netns.GetFromName(string(n))
	}
	if err != nil {
		return h, fmt.Errorf("open netns %s: %w", n, err)
	}
	return h, nil
}

// Run executes a command inside the namespace with stdin, returning its
// stdout; a failure carries stderr.
func (n Netns) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	var out []byte
	err := n.Do(func() error {
		cmd := exec.CommandContext(ctx, name, args...)
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		// Start forks from this (locked, switched) thread, which is what
		// puts the child in the namespace; Wait may run anywhere.
		if err := cmd.Start(); err != nil {
			return err
		}
		err := cmd.Wait()
		out = stdout.Bytes()
		if err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("run %s %s in netns %s: %w", name, strings.Join(args, " "), n, err)
	}
	return out, nil
}
