package routes

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// openHandle returns a rtnetlink handle whose socket lives in the named
// namespace: a path (contains "/") or an iproute2 name under /run/netns;
// "" means the caller's own namespace.
//
// A socket stays in the namespace it was created in, so only its creation
// needs the thread switch. That happens here on a throwaway locked thread
// rather than through netlink.NewHandleAt, which unlocks the thread even
// when switching it back fails and so could hand a thread stuck in the
// wrong namespace to an unrelated goroutine.
func openHandle(ns string) (*netlink.Handle, error) {
	if ns == "" {
		return netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	var (
		target netns.NsHandle
		err    error
	)
	if strings.Contains(ns, "/") {
		target, err = netns.GetFromPath(ns)
	} else {
		target, err = netns.GetFromName(ns)
	}
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", ns, err)
	}
	defer target.Close()

	type result struct {
		h   *netlink.Handle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("get current netns: %w", err)}
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread() // setns failed: the thread did not move
			done <- result{err: fmt.Errorf("enter netns %s: %w", ns, err)}
			return
		}
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			err = fmt.Errorf("netlink socket in netns %s: %w", ns, err)
		}
		if serr := netns.Set(orig); serr != nil {
			// Exit still locked: the runtime then retires the thread. The
			// handle is fine, its socket is where we want it.
			done <- result{h: h, err: err}
			return
		}
		runtime.UnlockOSThread()
		done <- result{h: h, err: err}
	}()
	r := <-done
	return r.h, r.err
}
