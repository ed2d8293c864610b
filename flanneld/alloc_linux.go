package flanneld

import (
	"context"

	"github.com/nodenet/nodenet/routes"
)

// allocBackend is upstream's "alloc": the node gets its subnet, subnet.env
// and the masquerade rules (the CNI plugin builds cni0 from subnet.env),
// and nothing on the node connects that subnet to the other nodes' — no
// route, device, neighbour or FDB entry for a peer. Something outside the
// node does: on a VPC, the cloud route controller's route per node podCIDR
// in the VPC router, reached through the node's default route.
//
// Its Sync still converges the node's owned routes inside the cluster
// networks, to none: a node switched from host-gw keeps no route to a peer.
// Devices of a vxlan run go before the backend starts (removeStaleDevices).
type allocBackend struct {
	ext *ExtIface
	rt  routeSync
}

func newAlloc(ns Netns, cfg *Config, ext *ExtIface) (*allocBackend, error) {
	t, err := routes.NewNetlinkTable(string(ns), 0, routes.ProtocolNodenet)
	if err != nil {
		return nil, err
	}
	return &allocBackend{ext: ext, rt: routeSync{table: t, networks: cfg.Networks()}}, nil
}

func (b *allocBackend) Close() { b.rt.table.Close() }

// Prepare publishes no backend type and no backend data, as upstream's
// alloc does (its lease attributes carry only the public IP): peers of
// any backend see a node they cannot and need not connect to.
func (b *allocBackend) Prepare(context.Context, selfInfo) (LocalAttrs, error) {
	return LocalAttrs{}, nil
}

// Setup: pods use the external interface's MTU, nothing encapsulates.
func (b *allocBackend) Setup(context.Context, Lease) (int, error) { return b.ext.MTU, nil }

func (b *allocBackend) Sync(ctx context.Context, _ []Lease) (syncResult, error) {
	return syncResult{}, b.rt.apply(ctx, nil)
}
