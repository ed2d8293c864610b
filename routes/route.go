package routes

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
)

// ProtocolNodenet is the rtm_protocol value nodenet marks its routes with
// (0x4e, 'N'). It is outside the kernel's reserved range (0-4) and not
// assigned in linux/rtnetlink.h or iproute2's rt_protos (gated 8 ... dhcp
// 16, keepalived 18, babel 42, openr 99, bgp/isis/ospf/rip 186-189,
// eigrp 192), nor used by the common CNI daemons we know of. Add
// "78 nodenet" to /etc/iproute2/rt_protos.d/nodenet.conf to make
// `ip route` print "proto nodenet".
const ProtocolNodenet netlink.RouteProtocol = 0x4e

// MainTable is the kernel's main routing table; a Table of 0 means it too.
const MainTable = 254

// Kernel values spelled out so this file builds off Linux (the fake and
// Diff are portable); they are part of the rtnetlink ABI.
const (
	localTable  = 255 // RT_TABLE_LOCAL
	protoStatic = 4   // RTPROT_STATIC
)

// Errors callers branch on. They are wrapped together with the kernel's
// errno, so errors.Is works with both (e.g. ErrNotFound and syscall.ESRCH).
var (
	// ErrExists: the destination is held by a route this table does not
	// own, so Add refuses to replace it.
	ErrExists = errors.New("route exists and is not ours")
	// ErrNotFound: Delete found no owned route matching.
	ErrNotFound = errors.New("route not found")
	// ErrInvalid: the route cannot be expressed in this table.
	ErrInvalid = errors.New("invalid route")
)

// Table is one routing table as seen by one owner (a routing protocol).
// Implementations must be safe for concurrent use.
type Table interface {
	// List returns the routes this table owns, and only those.
	List(ctx context.Context) ([]Route, error)
	// Add installs r. An owned route to the same destination is replaced
	// (so Add is idempotent and changes a gateway without a gap); a
	// foreign one makes Add fail with ErrExists.
	Add(ctx context.Context, r Route) error
	// Delete removes the owned route matching r (Gw and Dev, when set,
	// must match too) or fails with ErrNotFound.
	Delete(ctx context.Context, r Route) error
}

// Route is a unicast route. Gw or Dev (or both) must be set. Table and
// Protocol describe where a route lives: List fills them in; in a route
// given to a Table, zero means "this table's", anything else must match.
type Route struct {
	Dst      netip.Prefix
	Gw       netip.Addr // zero: directly connected through Dev
	Dev      string     // optional when Gw is set: the kernel picks it
	Table    int
	Protocol netlink.RouteProtocol
}

// RouteChange is a change a table's Watch reported to a route a table owns.
type RouteChange struct {
	// Route is the route as added or as deleted. Its Dev is left empty:
	// a deleted route's device may be gone by the time it is read.
	Route   Route
	Deleted bool
}

// String renders the route as `ip route` would.
func (r Route) String() string {
	var b strings.Builder
	b.WriteString(r.Dst.String())
	if r.Gw.IsValid() {
		b.WriteString(" via " + r.Gw.String())
	}
	if r.Dev != "" {
		b.WriteString(" dev " + r.Dev)
	}
	if r.Protocol != 0 {
		b.WriteString(" proto " + strconv.Itoa(int(r.Protocol)))
	}
	if r.Table != 0 {
		b.WriteString(" table " + strconv.Itoa(r.Table))
	}
	return b.String()
}

// Matches reports whether the observed route o satisfies r: same
// destination and gateway, and the same Dev, Table and Protocol where r
// sets them. It is how a desired route recognises the kernel's richer
// view of it (the kernel always reports the device it chose).
func (r Route) Matches(o Route) bool {
	return r.Dst == o.Dst && r.Gw == o.Gw &&
		(r.Dev == "" || r.Dev == o.Dev) &&
		(r.Table == 0 || r.Table == o.Table) &&
		(r.Protocol == 0 || r.Protocol == o.Protocol)
}

// Validate checks what the kernel would reject (or silently change), so
// the fake and the kernel fail the same way and before any syscall.
func (r Route) Validate() error {
	switch {
	case !r.Dst.IsValid():
		return fmt.Errorf("route %s: %w: no destination", r, ErrInvalid)
	case r.Dst.Addr().Is4In6():
		return fmt.Errorf("route %s: %w: IPv4-mapped destination", r, ErrInvalid)
	case r.Dst != r.Dst.Masked():
		return fmt.Errorf("route %s: %w: destination has host bits set (want %s)", r, ErrInvalid, r.Dst.Masked())
	case !r.Gw.IsValid() && r.Dev == "":
		return fmt.Errorf("route %s: %w: needs a gateway or a device", r, ErrInvalid)
	case r.Gw.IsValid() && (r.Gw.Is4In6() || r.Gw.Zone() != ""):
		return fmt.Errorf("route %s: %w: gateway must be a plain IPv4 or IPv6 address", r, ErrInvalid)
	case r.Gw.IsValid() && r.Gw.Is4() != r.Dst.Addr().Is4():
		return fmt.Errorf("route %s: %w: gateway and destination are of different families", r, ErrInvalid)
	}
	return nil
}

// owner is what a Table implementation is: one table, one protocol.
type owner struct {
	table int
	proto netlink.RouteProtocol
}

func newOwner(table int, proto netlink.RouteProtocol) (owner, error) {
	if table == 0 {
		table = MainTable
	}
	// local holds the kernel's own address routes; unspec (0xffffffff
	// in RTA_TABLE) is not a table.
	if table < 0 || table >= math.MaxUint32 || table == localTable {
		return owner{}, fmt.Errorf("routing table %d: reserved or out of range", table)
	}
	// 0-4 are shared by the kernel and administrators (unspec would even
	// match every route on delete); owning them would mean deleting routes
	// someone else added.
	if proto <= protoStatic || proto > 255 {
		return owner{}, fmt.Errorf("route protocol %d: must be in 5-255 and not the kernel's or an administrator's", proto)
	}
	return owner{table: table, proto: proto}, nil
}

// claim validates r for this owner and fills in Table and Protocol.
func (o owner) claim(r Route) (Route, error) {
	if err := r.Validate(); err != nil {
		return r, err
	}
	if r.Table != 0 && r.Table != o.table {
		return r, fmt.Errorf("route %s: %w: belongs to table %d, not %d", r, ErrInvalid, r.Table, o.table)
	}
	if r.Protocol != 0 && r.Protocol != o.proto {
		return r, fmt.Errorf("route %s: %w: has protocol %d, this table owns %d", r, ErrInvalid, r.Protocol, o.proto)
	}
	r.Table, r.Protocol = o.table, o.proto
	return r, nil
}
