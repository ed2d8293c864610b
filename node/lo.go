package node

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// setLoUp brings loopback up in the calling thread's namespace.
func setLoUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	return netlink.LinkSetUp(lo)
}
