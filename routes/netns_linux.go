package routes

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// openHandle returns a rtnetlink handle whose socket lives in the named
// namespace: a path or an iproute2 name (netnsutil.Path decides); "" means
// the caller's own namespace. A socket stays in the namespace it was
// created in, so only its creation needs the thread switch (netnsutil.Do;
// not netlink.NewHandleAt, which unlocks the thread even when switching it
// back fails). This is the one way nodenet opens a netlink handle in
// another namespace.
func openHandle(ns string) (*netlink.Handle, error) {
	if ns == "" {
		return netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	var h *netlink.Handle
	err := netnsutil.Do(netnsutil.Path(ns), func() error {
		var err error
		if h, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
			return fmt.Errorf("netlink socket in netns %s: %w", ns, err)
		}
		return nil
	})
	if err != nil && h != nil {
		h.Close()
		return nil, err
	}
	return h, err
}
