package flanneld

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"github.com/nodenet/nodenet/routes"
)

// selfInfo is what the API remembers about this node from a previous run.
type selfInfo struct {
	BackendData, BackendV6Data   json.RawMessage
	NodePublicIP, NodePublicIPv6 netip.Addr
}

// backend turns leases into kernel state. Prepare runs before the lease is
// acquired (the vxlan device's MAC is part of what we publish), Setup once
// our subnet is known, Sync on every reconcile.
type backend interface {
	Prepare(ctx context.Context, self selfInfo) (LocalAttrs, error)
	// Setup returns the MTU pods must use.
	Setup(ctx context.Context, own Lease) (mtu int, err error)
	Sync(ctx context.Context, peers []Lease) (syncResult, error)
	Close()
}

// syncResult counts what one Sync programmed. PeerErrors are peers that
// could not be connected (wrong backend, not on our L2 network, bad
// backend data): they are reported, and do not fail the sync.
type syncResult struct {
	Peers, Routes, Neighbours, FDB int
	PeerErrors                     []error
}

// wantRoute is a desired route; onLink routes point at a gateway no
// connected subnet covers (the vxlan backend's peer VTEP addresses).
type wantRoute struct {
	routes.Route
	onLink bool
}

// routeSync converges the routes we own inside the cluster networks. Owned
// routes outside them are left alone: another nodenet component may own
// routes with the same protocol in the same table.
type routeSync struct {
	table    *routes.NetlinkTable
	networks []netip.Prefix
}

// owned lists the routes this sync considers its own: our protocol, inside
// a cluster network. It is also all that Cleanup removes.
func (s *routeSync) owned(ctx context.Context) ([]routes.Route, error) {
	cur, err := s.table.List(ctx)
	if err != nil {
		return nil, err
	}
	ours := cur[:0]
	for _, r := range cur {
		for _, nw := range s.networks {
			if containsPrefix(nw, r.Dst) {
				ours = append(ours, r)
				break
			}
		}
	}
	return ours, nil
}

// apply converges the owned routes to want; apply(ctx, nil) removes them
// all.
func (s *routeSync) apply(ctx context.Context, want []wantRoute) error {
	ours, err := s.owned(ctx)
	if err != nil {
		return err
	}
	desired := make([]routes.Route, len(want))
	onLink := map[netip.Prefix]bool{}
	for i, w := range want {
		desired[i] = w.Route
		if w.onLink {
			onLink[w.Dst] = true
		}
	}
	add, del := routes.Diff(desired, ours)
	var errs []error
	for _, r := range add {
		if onLink[r.Dst] {
			err = s.table.AddOnLink(ctx, r)
		} else {
			err = s.table.Add(ctx, r)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range del {
		if err := s.table.Delete(ctx, r); err != nil && !errors.Is(err, routes.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// peerFamilies yields the enabled families a peer has a subnet in.
func peerFamilies(cfg *Config, p Lease) []peerFamily {
	var out []peerFamily
	if cfg.EnableIPv4 && p.Subnet.IsValid() {
		out = append(out, peerFamily{is4: true, subnet: p.Subnet, public: p.PublicIP, data: p.BackendData})
	}
	if cfg.EnableIPv6 && p.IPv6Subnet.IsValid() {
		out = append(out, peerFamily{subnet: p.IPv6Subnet, public: p.PublicIPv6, data: p.BackendV6Data})
	}
	return out
}

type peerFamily struct {
	is4    bool
	subnet netip.Prefix
	public netip.Addr
	data   json.RawMessage
}

func (f peerFamily) check(node string) error {
	switch {
	case !f.public.IsValid():
		return fmt.Errorf("peer %s: no public IP for %s", node, f.subnet)
	case f.public.Is4() != f.is4:
		return fmt.Errorf("peer %s: public IP %s is of the wrong family for %s", node, f.public, f.subnet)
	}
	return nil
}
