package flanneld

import (
	"context"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/routes"
)

// watchKernel nudges the sync loop whenever a route of ours (protocol
// routes.ProtocolNodenet) or a neighbour entry (ARP/NDP or VXLAN FDB) is
// deleted in the daemon's namespace, so peer state removed by hand or by
// another tool is put back within a sync (milliseconds) instead of at the
// next resync: the chaos suite measured 5–10 s of broken cross-node
// traffic with the resync alone. Other routes do not wake the sync.
// Neighbour deletions are not filtered: a deleted entry's notification
// does not say it was permanent (measured), so the kernel's expiry of
// learned neighbours costs a no-op sync, at most one per
// --min-sync-period. The resync stays the bound if the subscription fails.
func (d *Daemon) watchKernel(ctx context.Context) error {
	routeUpdates := make(chan netlink.RouteUpdate, 64)
	neighUpdates := make(chan netlink.NeighUpdate, 64)
	done := make(chan struct{})
	onErr := func(err error) { d.log.Debug("kernel watch", "err", err) }
	// A subscription's socket joins the groups of the namespace it is
	// created in: only the creation needs the thread switch.
	err := d.opts.Netns.Do(func() error {
		if err := netlink.RouteSubscribeWithOptions(routeUpdates, done, netlink.RouteSubscribeOptions{ErrorCallback: onErr}); err != nil {
			return fmt.Errorf("subscribe to routes: %w", err)
		}
		if err := netlink.NeighSubscribeWithOptions(neighUpdates, done, netlink.NeighSubscribeOptions{ErrorCallback: onErr}); err != nil {
			return fmt.Errorf("subscribe to neighbours: %w", err)
		}
		return nil
	})
	defer func() {
		close(done) // closes the sockets; their receivers then close the channels...
		for range routeUpdates {
		}
		for range neighUpdates {
		}
	}()
	if err != nil {
		return fmt.Errorf("watch kernel state in netns %s: %w", d.opts.Netns, err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-routeUpdates:
			if !ok {
				return fmt.Errorf("route subscription in netns %s closed", d.opts.Netns)
			}
			if u.Type == unix.RTM_DELROUTE && u.Protocol == routes.ProtocolNodenet {
				d.sync.Nudge()
			}
		case u, ok := <-neighUpdates:
			if !ok {
				return fmt.Errorf("neighbour subscription in netns %s closed", d.opts.Netns)
			}
			if u.Type == unix.RTM_DELNEIGH {
				d.sync.Nudge()
			}
		}
	}
}
