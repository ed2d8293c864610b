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
// opens and child processes it starts stay in that namespace. fn runs on a
// goroutine of its own, locked to its thread: if the thread cannot be
// switched back, that goroutine exits still locked and Go retires the
// thread, so neither the caller nor any other goroutine ever runs in the
// wrong namespace.
func Do(path string, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- onThread(path, fn) }()
	return <-done
}

func onThread(path string, fn func() error) error {
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
		return errors.Join(ferr, fmt.Errorf("restore netns: %w", err)) // exits locked
	}
	runtime.UnlockOSThread()
	return ferr
}
