package routes

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// AddOnLink is Add for a route whose gateway is not inside any subnet
// connected to Dev, which the kernel accepts only with RTNH_F_ONLINK: the
// vxlan backend routes a peer's subnet via the peer's VTEP address
// (10.244.2.0) on flannel.1, whose own address is a /32. Dev is required.
// List reports such routes like any other (the flag is not part of Route),
// so Diff and Delete work on them unchanged.
func (t *NetlinkTable) AddOnLink(ctx context.Context, r Route) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.Dev == "" || !r.Gw.IsValid() {
		return fmt.Errorf("add on-link route %s: %w: needs a gateway and a device", r, ErrInvalid)
	}
	r, nr, err := t.toNetlink(r)
	if err != nil {
		return fmt.Errorf("add on-link route: %w", err)
	}
	nr.Flags = int(netlink.FLAG_ONLINK)
	err = t.h.RouteAdd(nr)
	if errors.Is(err, unix.EEXIST) {
		var owned bool
		owned, err = t.ownsDst(ctx, r, nr)
		if err != nil {
			return fmt.Errorf("add on-link route %s in netns %s: %w", r, t.ns, err)
		}
		if !owned {
			return fmt.Errorf("add on-link route %s in netns %s: %w (%w)", r, t.ns, ErrExists, unix.EEXIST)
		}
		err = t.h.RouteReplace(nr)
	}
	if err != nil {
		return fmt.Errorf("add on-link route %s in netns %s: %w", r, t.ns, err)
	}
	return nil
}
