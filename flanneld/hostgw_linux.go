package flanneld

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nodenet/nodenet/routes"
)

// hostGW routes every peer's subnet via the peer's public IP. That only
// works when the peer is a neighbour on the same L2 network, so a peer
// whose IP is not in a subnet connected to the external interface is
// refused rather than given a route that would black-hole traffic.
type hostGW struct {
	cfg *Config
	ext *ExtIface
	rt  routeSync
	log *slog.Logger
}

func newHostGW(ns Netns, cfg *Config, ext *ExtIface, log *slog.Logger) (*hostGW, error) {
	t, err := routes.NewNetlinkTable(string(ns), 0, routes.ProtocolNodenet)
	if err != nil {
		return nil, err
	}
	return &hostGW{cfg: cfg, ext: ext, rt: routeSync{table: t, networks: cfg.Networks()}, log: log}, nil
}

func (b *hostGW) Close() { b.rt.table.Close() }

func (b *hostGW) Prepare(ctx context.Context, _ selfInfo) (LocalAttrs, error) {
	return LocalAttrs{BackendType: BackendHostGW}, nil
}

func (b *hostGW) Setup(ctx context.Context, _ Lease) (int, error) { return b.ext.MTU, nil }

func (b *hostGW) Sync(ctx context.Context, peers []Lease) (syncResult, error) {
	var res syncResult
	var want []wantRoute
	for _, p := range peers {
		if p.BackendType != BackendHostGW {
			res.PeerErrors = append(res.PeerErrors, fmt.Errorf("peer %s: backend-type %q, this node runs host-gw", p.Node, p.BackendType))
			continue
		}
		res.Peers++
		for _, f := range peerFamilies(b.cfg, p) {
			if err := f.check(p.Node); err != nil {
				res.PeerErrors = append(res.PeerErrors, err)
				continue
			}
			if !b.ext.OnLink(f.public) {
				res.PeerErrors = append(res.PeerErrors, fmt.Errorf("peer %s: public IP %s is not on a network connected to %s (%v): host-gw needs every node on one L2 network; use vxlan (DirectRouting) instead",
					p.Node, f.public, b.ext.Name, b.ext.Connected))
				continue
			}
			want = append(want, wantRoute{Route: routes.Route{Dst: f.subnet, Gw: f.public, Dev: b.ext.Name}})
		}
	}
	res.Routes = len(want)
	return res, b.rt.apply(ctx, want)
}
