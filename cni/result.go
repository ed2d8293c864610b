package cni

import (
	"github.com/nodenet/nodenet/cni/kernel"
	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// Indexes of our interfaces in the result, the order the bridge plugin
// uses: bridge, host end, pod end.
const (
	ifBridge = iota
	ifHost
	ifPod
)

func buildResult(n *network, br kernel.MAC, v *vethPair, ifName, netnsPath string, allocs []hostlocal.Allocation, routes []*protocol.Route) *protocol.Result {
	r := &protocol.Result{CNIVersion: n.cniVersion, DNS: n.dns, Routes: routes}
	r.Interfaces = []*protocol.Interface{
		{Name: n.bridge, Mac: br.String()},
		{Name: v.hostName, Mac: v.hostMAC.String()},
		{Name: ifName, Mac: v.podMAC.String(), Sandbox: netnsPath},
	}
	// "mtu" is a 1.1.0 field; older results keep their exact shape.
	if protocol.VersionAtLeast(n.cniVersion, "1.1.0") {
		for _, i := range r.Interfaces {
			i.Mtu = n.mtu
		}
	}
	for _, a := range allocs {
		idx := ifPod
		r.IPs = append(r.IPs, &protocol.IPConfig{Interface: &idx, Address: a.Address, Gateway: a.Gateway})
	}
	return r
}
