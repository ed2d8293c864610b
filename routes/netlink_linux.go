package routes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkTable is a Table backed by a kernel routing table in one network
// namespace. Only routes carrying its protocol are listed, replaced or
// deleted.
type NetlinkTable struct {
	owner
	h    *netlink.Handle
	ns   string // for error messages
	path string // the namespace as given, for Watch's socket
}

var _ Table = (*NetlinkTable)(nil)

// NewNetlinkTable opens routing table tableID (0 = main) in the network
// namespace ns — a path such as /run/netns/vpc or /proc/1234/ns/net, an
// iproute2 name such as "vpc", or "" for the caller's namespace — owning
// the routes marked with proto (usually ProtocolNodenet). Close it when
// done.
func NewNetlinkTable(ns string, tableID int, proto netlink.RouteProtocol) (*NetlinkTable, error) {
	o, err := newOwner(tableID, proto)
	if err != nil {
		return nil, err
	}
	h, label, err := openTable(ns)
	if err != nil {
		return nil, err
	}
	return &NetlinkTable{owner: o, h: h, ns: label, path: ns}, nil
}

// Close releases the netlink socket. The routes stay.
func (t *NetlinkTable) Close() { t.h.Close() }

const socketTimeout = 10 * time.Second

// dumpRetries bounds retries of a dump the kernel reports as interrupted
// by a concurrent change (NLM_F_DUMP_INTR), which may be incomplete.
const dumpRetries = 5

// List returns the owned routes in the table, IPv4 and IPv6.
func (t *NetlinkTable) List(ctx context.Context) ([]Route, error) {
	nrs, err := t.dump(ctx, netlink.FAMILY_ALL, &netlink.Route{Table: t.table, Protocol: t.proto}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, err
	}
	names, err := t.linkNames(nrs)
	if err != nil {
		return nil, err
	}
	out := make([]Route, 0, len(nrs))
	for _, nr := range nrs {
		if r, ok := fromNetlink(nr, names); ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func (t *NetlinkTable) dump(ctx context.Context, family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		nrs, err := t.h.RouteListFiltered(family, filter, mask)
		if errors.Is(err, netlink.ErrDumpInterrupted) && attempt < dumpRetries {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list routes in table %d in netns %s: %w", t.table, t.ns, err)
		}
		return nrs, nil
	}
}

func (t *NetlinkTable) linkNames(nrs []netlink.Route) (map[int]string, error) {
	names := map[int]string{}
	for _, nr := range nrs {
		if nr.LinkIndex == 0 || names[nr.LinkIndex] != "" {
			continue
		}
		l, err := t.h.LinkByIndex(nr.LinkIndex)
		if err != nil {
			return nil, fmt.Errorf("find link %d in netns %s: %w", nr.LinkIndex, t.ns, err)
		}
		names[nr.LinkIndex] = l.Attrs().Name
	}
	return names, nil
}

// fromNetlink converts an owned kernel route; multipath and non-IP routes
// come back without a gateway, so Diff deletes them if nobody wants them.
func fromNetlink(nr netlink.Route, names map[int]string) (Route, bool) {
	r := Route{Table: nr.Table, Protocol: nr.Protocol, Dev: names[nr.LinkIndex]}
	switch {
	case nr.Dst != nil:
		addr, ok := netip.AddrFromSlice(nr.Dst.IP)
		if !ok {
			return Route{}, false
		}
		ones, _ := nr.Dst.Mask.Size()
		r.Dst = netip.PrefixFrom(addr.Unmap(), ones)
	case nr.Family == unix.AF_INET:
		r.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	case nr.Family == unix.AF_INET6:
		r.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	default:
		return Route{}, false
	}
	if gw, ok := netip.AddrFromSlice(nr.Gw); ok {
		r.Gw = gw.Unmap()
	}
	return r, true
}

// toNetlink claims r for this table and resolves its device.
func (t *NetlinkTable) toNetlink(r Route) (Route, *netlink.Route, error) {
	r, err := t.claim(r)
	if err != nil {
		return r, nil, err
	}
	nr := &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Table:    r.Table,
		Protocol: r.Protocol,
	}
	if r.Gw.IsValid() {
		nr.Gw = r.Gw.AsSlice()
	} else {
		// As iproute2 does: without a gateway the destination is on-link.
		nr.Scope = netlink.SCOPE_LINK
	}
	if r.Dev != "" {
		l, err := t.h.LinkByName(r.Dev)
		if err != nil {
			return r, nil, fmt.Errorf("route %s: find device in netns %s: %w", r, t.ns, err)
		}
		nr.LinkIndex = l.Attrs().Index
	}
	return r, nr, nil
}

// Add installs r, replacing an owned route to the same destination.
func (t *NetlinkTable) Add(ctx context.Context, r Route) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r, nr, err := t.toNetlink(r)
	if err != nil {
		return fmt.Errorf("add route: %w", err)
	}
	// Create-exclusive first so a foreign route is never overwritten; only
	// when the destination turns out to be ours do we replace. A foreign
	// route appearing between the check and the replace would be lost, a
	// race we accept: the kernel offers no conditional replace.
	err = t.h.RouteAdd(nr)
	if errors.Is(err, unix.EEXIST) {
		var owned bool
		owned, err = t.ownsDst(ctx, r, nr)
		if err != nil {
			return fmt.Errorf("add route %s in netns %s: %w", r, t.ns, err)
		}
		if !owned {
			return fmt.Errorf("add route %s in netns %s: %w (%w)", r, t.ns, ErrExists, unix.EEXIST)
		}
		err = t.h.RouteReplace(nr)
	}
	if err != nil {
		return fmt.Errorf("add route %s in netns %s: %w", r, t.ns, err)
	}
	return nil
}

// ownsDst reports whether an owned route to nr's destination exists in the
// table. Ours are always at the default metric, so if one exists it is the
// route the add collided with.
func (t *NetlinkTable) ownsDst(ctx context.Context, r Route, nr *netlink.Route) (bool, error) {
	family := netlink.FAMILY_V6
	if r.Dst.Addr().Is4() {
		family = netlink.FAMILY_V4
	}
	filter := &netlink.Route{Table: t.table, Dst: nr.Dst, Protocol: t.proto}
	nrs, err := t.dump(ctx, family, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return false, err
	}
	return len(nrs) > 0, nil
}

// Delete removes the owned route matching r.
func (t *NetlinkTable) Delete(ctx context.Context, r Route) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r, nr, err := t.toNetlink(r)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		// Routes die with their device.
		return fmt.Errorf("delete route %s in netns %s: %w (%w)", r, t.ns, ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("delete route: %w", err)
	}
	// The protocol in the request makes the kernel match only our routes;
	// scope "nowhere" matches any scope, as `ip route del` does.
	nr.Scope = netlink.SCOPE_NOWHERE
	err = t.h.RouteDel(nr)
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete route %s in netns %s: %w (%w)", r, t.ns, ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("delete route %s in netns %s: %w", r, t.ns, err)
	}
	return nil
}
