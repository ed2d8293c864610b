package cni

import (
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// Indexes of our interfaces in the result, the order the bridge plugin
// uses: bridge, host end, pod end.
const (
	ifBridge = iota
	ifHost
	ifPod
)

func buildResult(n *network, br net.HardwareAddr, v *vethPair, hostName, ifName, netnsPath string, allocs []hostlocal.Allocation, routes []*types.Route) *current.Result {
	r := &current.Result{CNIVersion: current.ImplementedSpecVersion, DNS: n.dns, Routes: routes}
	r.Interfaces = []*current.Interface{
		{Name: n.bridge, Mac: br.String()},
		{Name: hostName, Mac: v.hostMAC.String()},
		{Name: ifName, Mac: v.podMAC.String(), Sandbox: netnsPath},
	}
	// "mtu" is a 1.1.0 field; older results keep their exact shape.
	if ok, _ := version.GreaterThanOrEqualTo(n.cniVersion, "1.1.0"); ok {
		for _, i := range r.Interfaces {
			i.Mtu = n.mtu
		}
	}
	for _, a := range allocs {
		r.IPs = append(r.IPs, &current.IPConfig{
			Interface: current.Int(ifPod),
			Address:   prefixToIPNet(a.Address),
			Gateway:   a.Gateway.AsSlice(),
		})
	}
	return r
}

// chain appends our result to a previous plugin's, shifting our interface
// indexes past its interfaces.
func chain(prev types.Result, ours *current.Result) (*current.Result, error) {
	if prev == nil {
		return ours, nil
	}
	p, err := current.NewResultFromResult(prev)
	if err != nil {
		return nil, errorf(CodeDecode, "convert prevResult: %w", err)
	}
	offset := len(p.Interfaces)
	p.Interfaces = append(p.Interfaces, ours.Interfaces...)
	for _, ip := range ours.IPs {
		ip.Interface = current.Int(*ip.Interface + offset)
		p.IPs = append(p.IPs, ip)
	}
	p.Routes = append(p.Routes, ours.Routes...)
	if p.DNS.IsEmpty() {
		p.DNS = ours.DNS
	}
	p.CNIVersion = current.ImplementedSpecVersion
	return p, nil
}
