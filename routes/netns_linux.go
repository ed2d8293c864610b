package routes

import (
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// openHandle returns a rtnetlink handle whose socket lives in the named
// namespace: a path (contains "/") or an iproute2 name under /run/netns;
// "" means the caller's own namespace. A socket stays in the namespace it
// was created in, so only its creation needs the thread switch
// (netnsutil.Do; not netlink.NewHandleAt, which unlocks the thread even
// when switching it back fails).
func openHandle(ns string) (*netlink.Handle, error) {
	if ns == "" {
		return netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	path := ns
	if !strings.Contains(ns, "/") {
		path = "/run/netns/" + ns
	}
	var h *netlink.Handle
	err := netnsutil.Do(path, func() error {
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
