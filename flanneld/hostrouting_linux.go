package flanneld

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/nodenet/nodenet/routes/hostrouting"
)

// --host-routing values.
const (
	HostRoutingKernel = "kernel"
	HostRoutingEBPF   = "ebpf"
	// DefaultPodBridge is the bridge the CNI plugin creates (flannel's).
	DefaultPodBridge = "cni0"
)

// startHostRouting attaches the eBPF host routing programs. The uplinks
// are the interfaces other nodes' pods are reached through: the external
// interface (host-gw and alloc routes, vxlan's DirectRouting) and the
// vxlan devices.
func (d *Daemon) startHostRouting(ctx context.Context, ext *ExtIface, own Lease) (*hostrouting.Router, error) {
	uplinks := []string{ext.Name}
	if d.cfg.Backend.Type == BackendVXLAN {
		if d.cfg.EnableIPv4 {
			uplinks = append(uplinks, vxlanDevName(d.cfg.Backend.VNI, true))
		}
		if d.cfg.EnableIPv6 {
			uplinks = append(uplinks, vxlanDevName(d.cfg.Backend.VNI, false))
		}
	}
	var local []netip.Prefix
	for _, s := range []netip.Prefix{own.Subnet, own.IPv6Subnet} {
		if s.IsValid() {
			local = append(local, s)
		}
	}
	r, err := hostrouting.Start(ctx, hostrouting.Config{Netns: string(d.opts.Netns), PodNetworks: d.cfg.Networks(),
		LocalSubnets: local, Bridge: d.opts.PodBridge, Uplinks: uplinks}, d.log)
	if err != nil {
		return nil, fmt.Errorf("--host-routing=%s: %w", HostRoutingEBPF, err)
	}
	if err := d.m.reg.Register(r.Collector()); err != nil {
		r.Close()
		return nil, fmt.Errorf("register host routing metrics: %w", err)
	}
	return r, nil
}
