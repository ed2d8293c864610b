package routes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink"
)

// Fake is an in-memory Table that behaves like NetlinkTable against the
// kernel: it holds the whole routing table (owned and foreign routes),
// lists only owned ones, fails Add with ErrExists (and EEXIST) when a
// foreign route holds the destination, and Delete with ErrNotFound (and
// ESRCH) when no owned route matches. It does not model devices or
// gateway reachability: any Dev name is accepted.
type Fake struct {
	owner
	mu     sync.Mutex
	routes []Route // the whole table, Table and Protocol filled in
}

var _ Table = (*Fake)(nil)

// NewFake returns an empty fake of routing table tableID (0 = main) owning
// the routes marked with proto, validated as NewNetlinkTable does.
func NewFake(tableID int, proto netlink.RouteProtocol) (*Fake, error) {
	o, err := newOwner(tableID, proto)
	if err != nil {
		return nil, err
	}
	return &Fake{owner: o}, nil
}

// List returns the owned routes.
func (f *Fake) List(ctx context.Context) ([]Route, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Route
	for _, r := range f.routes {
		if r.Protocol == f.proto {
			out = append(out, r)
		}
	}
	return out, nil
}

// Add installs r, replacing an owned route to the same destination.
func (f *Fake) Add(ctx context.Context, r Route) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r, err := f.claim(r)
	if err != nil {
		return fmt.Errorf("add route: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.indexDst(r)
	switch {
	case i < 0:
		f.routes = append(f.routes, r)
	case f.routes[i].Protocol == f.proto:
		f.routes[i] = r
	default:
		return fmt.Errorf("add route %s in fake: %w (%w)", r, ErrExists, syscall.EEXIST)
	}
	return nil
}

// Delete removes the owned route matching r: same destination, and the
// same gateway and device where r sets them, as the kernel matches.
func (f *Fake) Delete(ctx context.Context, r Route) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r, err := f.claim(r)
	if err != nil {
		return fmt.Errorf("delete route: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.routes {
		if x.Dst == r.Dst && x.Protocol == r.Protocol &&
			(!r.Gw.IsValid() || r.Gw == x.Gw) && (r.Dev == "" || r.Dev == x.Dev) {
			f.routes = slices.Delete(f.routes, i, i+1)
			return nil
		}
	}
	return fmt.Errorf("delete route %s in fake: %w (%w)", r, ErrNotFound, syscall.ESRCH)
}

// AddForeign adds a route someone else owns (protocol 0 means "static"),
// failing with EEXIST like `ip route add` when the destination is taken.
func (f *Fake) AddForeign(r Route) error {
	if r.Protocol == 0 {
		r.Protocol = protoStatic
	}
	if r.Protocol == f.proto {
		return fmt.Errorf("add foreign route %s: %w: protocol %d is this table's", r, ErrInvalid, r.Protocol)
	}
	if err := r.Validate(); err != nil {
		return fmt.Errorf("add foreign route: %w", err)
	}
	r.Table = f.table
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.indexDst(r) >= 0 {
		return fmt.Errorf("add foreign route %s: %w", r, syscall.EEXIST)
	}
	f.routes = append(f.routes, r)
	return nil
}

// DeleteOwned removes an owned route behind the table's back, as an
// administrator's `ip route del` would; it reports whether one matched.
func (f *Fake) DeleteOwned(r Route) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.routes {
		if x.Protocol == f.proto && r.Matches(x) {
			f.routes = slices.Delete(f.routes, i, i+1)
			return true
		}
	}
	return false
}

// All returns every route in the table, owned or not.
func (f *Fake) All() []Route {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.routes)
}

// Dump renders the whole table in `ip route show table N` syntax, one
// route per line, sorted, for test failure messages and golden files.
func (f *Fake) Dump() string {
	all := f.All()
	lines := make([]string, 0, len(all))
	for _, r := range all {
		lines = append(lines, r.String())
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// indexDst finds the route holding r's destination. The kernel keys a
// table by destination (and metric and TOS, which Tables never set).
func (f *Fake) indexDst(r Route) int {
	return slices.IndexFunc(f.routes, func(x Route) bool { return x.Dst == r.Dst })
}
