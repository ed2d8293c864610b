package routes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// Watch reports the kernel's changes to the routes this table owns —
// added, replaced or deleted, by anyone, this process included — to
// changed, from one goroutine, until ctx ends (nil) or the subscription
// fails (an error). subscribed is called once the kernel reports to the
// subscription: a List after it misses no change. Changes made while no
// Watch runs are never reported, so a caller re-lists after (re)starting
// one; the kernel also drops notifications when the socket's buffer
// overflows, which ends the subscription with ENOBUFS. Some removals come
// without a notification at all (IPv4 routes flushed with their device's
// address or carrier): only a periodic List finds those.
func (t *NetlinkTable) Watch(ctx context.Context, subscribed func(), changed func(RouteChange)) error {
	updates := make(chan netlink.RouteUpdate, 64)
	done := make(chan struct{})
	var (
		mu      sync.Mutex
		lastErr error
	)
	opts := netlink.RouteSubscribeOptions{ErrorCallback: func(err error) {
		mu.Lock()
		lastErr = err
		mu.Unlock()
	}}
	// The socket joins the route groups of the namespace it is created
	// in, so only its creation needs the thread switch.
	subscribe := func() error { return netlink.RouteSubscribeWithOptions(updates, done, opts) }
	var err error
	if t.path == "" {
		err = subscribe()
	} else {
		err = netnsutil.Do(netnsutil.Path(t.path), subscribe)
	}
	if err != nil {
		close(done)
		return fmt.Errorf("watch routes in netns %s: %w", t.ns, err)
	}
	defer func() {
		close(done) // closes the socket, which ends the receiver...
		for range updates {
			// ...once it is not blocked sending to us.
		}
	}()
	subscribed()
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-updates:
			if !ok {
				mu.Lock()
				defer mu.Unlock()
				if lastErr == nil {
					lastErr = errors.New("receiver stopped")
				}
				return fmt.Errorf("watch routes in netns %s: subscription ended: %w", t.ns, lastErr)
			}
			if u.Table != t.table || u.Protocol != t.proto {
				continue
			}
			if r, ok := fromNetlink(u.Route, nil); ok {
				changed(RouteChange{Route: r, Deleted: u.Type == unix.RTM_DELROUTE})
			}
		}
	}
}
