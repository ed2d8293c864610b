package routes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FDBTable manages the permanent forwarding-database entries of one vxlan
// device (NTF_SELF: the device's own table, not a bridge's) in one network
// namespace. Like NeighTable it looks the device up on every call.
type FDBTable struct {
	h   *netlink.Handle
	dev string
	ns  string
}

// NewFDBTable opens the FDB of the vxlan device dev in ns. Close it when
// done.
func NewFDBTable(ns, dev string) (*FDBTable, error) {
	h, label, err := openTable(ns)
	if err != nil {
		return nil, err
	}
	return &FDBTable{h: h, dev: dev, ns: label}, nil
}

// Close releases the netlink socket; the entries stay.
func (t *FDBTable) Close() { t.h.Close() }

// List returns the device's permanent unicast entries that have a remote.
func (t *FDBTable) List(ctx context.Context) ([]FDBEntry, error) {
	idx, err := linkIndex(t.h, t.dev, t.ns)
	if err != nil {
		return nil, err
	}
	ns, err := listNeigh(ctx, t.h, idx, unix.AF_BRIDGE)
	if err != nil {
		return nil, fmt.Errorf("list fdb of %s in netns %s: %w", t.dev, t.ns, err)
	}
	var out []FDBEntry
	for _, n := range ns {
		dst, ok := netip.AddrFromSlice(n.IP)
		if !ok || n.State&netlink.NUD_PERMANENT == 0 || n.Flags&netlink.NTF_SELF == 0 || macOrNil(n.HardwareAddr) == nil {
			continue
		}
		out = append(out, FDBEntry{MAC: n.HardwareAddr, Dst: dst.Unmap()})
	}
	return out, nil
}

// Set adds e or replaces the entry for e.MAC.
func (t *FDBTable) Set(ctx context.Context, e FDBEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	idx, err := linkIndex(t.h, t.dev, t.ns)
	if err != nil {
		return err
	}
	if err := t.h.NeighSet(fdbToNetlink(idx, e)); err != nil {
		return fmt.Errorf("set fdb %s on %s in netns %s: %w", e, t.dev, t.ns, err)
	}
	return nil
}

// Delete removes e or fails with ErrNotFound.
func (t *FDBTable) Delete(ctx context.Context, e FDBEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	idx, err := linkIndex(t.h, t.dev, t.ns)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return fmt.Errorf("delete fdb %s: %w (%w)", e, ErrNotFound, err)
	}
	if err != nil {
		return err
	}
	err = t.h.NeighDel(fdbToNetlink(idx, e))
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("delete fdb %s on %s in netns %s: %w (%w)", e, t.dev, t.ns, ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("delete fdb %s on %s in netns %s: %w", e, t.dev, t.ns, err)
	}
	return nil
}

func fdbToNetlink(idx int, e FDBEntry) *netlink.Neigh {
	return &netlink.Neigh{
		LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT, Flags: netlink.NTF_SELF,
		IP: e.Dst.AsSlice(), HardwareAddr: e.MAC,
	}
}
