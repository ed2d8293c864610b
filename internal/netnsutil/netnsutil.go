// Package netnsutil runs code inside a network namespace given by path, the
// way the local cluster and the node agent start processes and open sockets
// in node and pod namespaces.
package netnsutil

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn on a thread switched into the namespace at path. Sockets fn
// opens and child processes it starts stay in that namespace. If the thread
// cannot be switched back it stays locked, so Go retires it instead of
// reusing a thread in the wrong namespace.
func Do(path string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(path)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", path, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("restore netns: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}
