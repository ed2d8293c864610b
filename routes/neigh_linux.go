package routes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NeighTable manages the permanent neighbour entries of one device in one
// network namespace. Entries the kernel learnt itself (reachable, stale,
// failed …) are neither listed nor touched. The device is looked up by
// name on every call, so the table survives the device being recreated.
type NeighTable struct {
	h   *netlink.Handle
	dev string
	ns  string
}

// NewNeighTable opens the neighbour table of dev in ns (see
// NewNetlinkTable for how ns is spelt). Close it when done.
func NewNeighTable(ns, dev string) (*NeighTable, error) {
	h, label, err := openTable(ns)
	if err != nil {
		return nil, err
	}
	return &NeighTable{h: h, dev: dev, ns: label}, nil
}

// Close releases the netlink socket; the entries stay.
func (t *NeighTable) Close() { t.h.Close() }

// List returns the permanent IPv4 and IPv6 entries of the device.
func (t *NeighTable) List(ctx context.Context) ([]Neigh, error) {
	idx, err := t.index()
	if err != nil {
		return nil, err
	}
	var out []Neigh
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		ns, err := listNeigh(ctx, t.h, idx, family)
		if err != nil {
			return nil, fmt.Errorf("list neighbours of %s in netns %s: %w", t.dev, t.ns, err)
		}
		for _, n := range ns {
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok || n.State&netlink.NUD_PERMANENT == 0 {
				continue
			}
			out = append(out, Neigh{IP: ip.Unmap(), MAC: n.HardwareAddr})
		}
	}
	return out, nil
}

// Set adds n or replaces the entry for n.IP.
func (t *NeighTable) Set(ctx context.Context, n Neigh) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	idx, err := t.index()
	if err != nil {
		return err
	}
	if err := t.h.NeighSet(t.toNetlink(idx, n)); err != nil {
		return fmt.Errorf("set neighbour %s on %s in netns %s: %w", n, t.dev, t.ns, err)
	}
	return nil
}

// Delete removes the entry for n.IP or fails with ErrNotFound.
func (t *NeighTable) Delete(ctx context.Context, n Neigh) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	idx, err := t.index()
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return fmt.Errorf("delete neighbour %s: %w (%w)", n, ErrNotFound, err)
	}
	if err != nil {
		return err
	}
	err = t.h.NeighDel(t.toNetlink(idx, n))
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("delete neighbour %s on %s in netns %s: %w (%w)", n, t.dev, t.ns, ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("delete neighbour %s on %s in netns %s: %w", n, t.dev, t.ns, err)
	}
	return nil
}

func (t *NeighTable) toNetlink(idx int, n Neigh) *netlink.Neigh {
	family := netlink.FAMILY_V6
	if n.IP.Is4() {
		family = netlink.FAMILY_V4
	}
	return &netlink.Neigh{
		LinkIndex: idx, Family: family, State: netlink.NUD_PERMANENT, Type: unix.RTN_UNICAST,
		IP: n.IP.AsSlice(), HardwareAddr: n.MAC,
	}
}

func (t *NeighTable) index() (int, error) {
	return linkIndex(t.h, t.dev, t.ns)
}

func linkIndex(h *netlink.Handle, dev, ns string) (int, error) {
	l, err := h.LinkByName(dev)
	if err != nil {
		return 0, fmt.Errorf("find device %s in netns %s: %w", dev, ns, err)
	}
	return l.Attrs().Index, nil
}

// listNeigh retries dumps the kernel reports as interrupted.
func listNeigh(ctx context.Context, h *netlink.Handle, idx, family int) ([]netlink.Neigh, error) {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ns, err := h.NeighList(idx, family)
		if errors.Is(err, netlink.ErrDumpInterrupted) && attempt < dumpRetries {
			continue
		}
		return ns, err
	}
}

// macOrNil keeps zero-length addresses out of comparisons.
func macOrNil(m net.HardwareAddr) net.HardwareAddr {
	if len(m) == 0 {
		return nil
	}
	return m
}
