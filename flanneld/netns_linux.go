package flanneld

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/routes"
)

// Netns is the network namespace the daemon programs: "" is its own (the
// DaemonSet case, no thread switching at all), otherwise an iproute2 name
// or a path such as /proc/1234/ns/net. The same daemon code thus serves a
// real host and a node namespace of a local cluster or a test. The kernel
// work itself is netnsutil's and routes'.
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

// Do runs fn on an OS thread inside the namespace (netnsutil.Do). Sockets
// fn opens stay in the namespace; processes it starts inherit it.
func (n Netns) Do(fn func() error) error {
	if n == "" {
		return fn()
	}
	return netnsutil.Do(netnsutil.Path(string(n)), fn)
}

// Run executes a command inside the namespace with stdin, returning its
// stdout; a failure carries stderr.
func (n Netns) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var err error
	if n == "" {
		err = cmd.Start()
	} else {
		// Forked from a thread in the namespace; Wait may run anywhere.
		err = netnsutil.Start(netnsutil.Path(string(n)), cmd)
	}
	if err == nil {
		if err = cmd.Wait(); err != nil {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
		}
	}
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("run %s %s in netns %s: %w", name, strings.Join(args, " "), n, err)
	}
	return stdout.Bytes(), nil
}
