package cni

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/nodenet/nodenet/cni/kernel"
	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// Check implements CHECK: it compares the kernel and the allocation store
// with prevResult and reports every difference it finds.
func (p *Plugin) Check(ctx context.Context, args *protocol.CmdArgs) error {
	c, log, done, err := p.start(args, true)
	if err != nil {
		return err
	}
	defer done()
	if c.PrevResult == nil {
		return protocol.Errorf(protocol.CodeInvalidConfig, "CHECK needs prevResult")
	}
	var n *network
	switch c.Type {
	case TypeNodenet:
		env, err := readSubnetEnv(c.SubnetFile)
		if err != nil {
			return err
		}
		if n, err = nodenetNetwork(c, env); err != nil {
			return err
		}
	case TypeFlannel:
		conf, err := loadDelegate(c.DataDir, args.ContainerID)
		if err != nil {
			return protocol.WithCode(protocol.CodeIO, err)
		}
		if conf == nil {
			return protocol.Errorf(protocol.CodeUnknownContainer, "no delegate cache %s for container %s", cachePath(c.DataDir, args.ContainerID), args.ContainerID)
		}
		typ, err := delegateType(conf)
		if err != nil {
			return err
		}
		if typ != defaultDelegateType {
			withPrev, err := withPrevResult(conf, c.RawPrevResult)
			if err != nil {
				return err
			}
			_, err = execDelegate(ctx, "CHECK", typ, withPrev, args)
			return err
		}
		if n, err = bridgeNetwork(conf); err != nil {
			return err
		}
	}
	if err := check(n, args, c.PrevResult); err != nil {
		log.Warn("CHECK failed", "err", err)
		return err
	}
	return nil
}

func check(n *network, args *protocol.CmdArgs, prev *protocol.Result) error {
	podIdx, hostIdx := -1, -1
	for i, itf := range prev.Interfaces {
		switch {
		case itf.Name == args.IfName && itf.Sandbox == args.Netns:
			podIdx = i
		case itf.Sandbox == "" && itf.Name != n.bridge && hostIdx < 0:
			hostIdx = i
		}
	}
	if podIdx < 0 {
		return protocol.Errorf(protocol.CodeInvalidConfig, "prevResult has no interface %s in %s", args.IfName, args.Netns)
	}
	var want []netip.Prefix
	for _, ip := range prev.IPs {
		if ip.Interface != nil && *ip.Interface == podIdx {
			want = append(want, ip.Address)
		}
	}

	podNS, err := kernel.OpenNetNS(args.Netns)
	if err != nil {
		return protocol.Errorf(protocol.CodeBadEnv, "CNI_NETNS %q: %w", args.Netns, err)
	}
	defer podNS.Close()
	pc, err := podNS.Dial()
	if err != nil {
		return err
	}
	defer pc.Close()
	hc, err := kernel.Dial()
	if err != nil {
		return err
	}
	defer hc.Close()

	var diffs []error
	podLink, err := pc.Link(args.IfName)
	if err != nil {
		diffs = append(diffs, fmt.Errorf("interface %s: %w", args.IfName, err))
	} else {
		diffs = append(diffs, checkPodLink(pc, podLink, n, prev.Interfaces[podIdx], want, prev)...)
	}
	if hostIdx >= 0 {
		diffs = append(diffs, checkHostLink(hc, n, prev.Interfaces[hostIdx].Name, podLink)...)
	}
	diffs = append(diffs, checkAllocation(n, args, want)...)
	if err := errors.Join(diffs...); err != nil {
		return fmt.Errorf("check %s %s: %w", args.ContainerID, args.IfName, err)
	}
	return nil
}

func checkPodLink(pc *kernel.Conn, l *kernel.Link, n *network, itf *protocol.Interface, want []netip.Prefix, prev *protocol.Result) []error {
	var diffs []error
	name := l.Name
	if l.Kind != "veth" {
		diffs = append(diffs, fmt.Errorf("%s is a %s, not a veth", name, l.Kind))
	}
	if itf.Mac != "" && l.MAC.String() != itf.Mac {
		diffs = append(diffs, fmt.Errorf("%s has MAC %s, prevResult says %s", name, l.MAC, itf.Mac))
	}
	if l.MTU != n.mtu {
		diffs = append(diffs, fmt.Errorf("%s has MTU %d, want %d", name, l.MTU, n.mtu))
	}
	if !l.Up() {
		diffs = append(diffs, fmt.Errorf("%s is down", name))
	}
	have, err := pc.Addrs(l.Index)
	if err != nil {
		return append(diffs, fmt.Errorf("addresses of %s: %w", name, err))
	}
	var allocs []hostlocal.Allocation
	for _, ip := range prev.IPs {
		allocs = append(allocs, hostlocal.Allocation{Address: ip.Address, Gateway: ip.Gateway.Unmap()})
	}
	for _, p := range want {
		if !slices.Contains(have, p) {
			diffs = append(diffs, fmt.Errorf("address %s missing on %s", p, name))
		}
	}
	routes, err := pc.Routes(l.Index)
	if err != nil {
		return append(diffs, err)
	}
	for _, r := range prev.Routes {
		gw := routeGateway(r, allocs)
		if !slices.ContainsFunc(routes, func(k kernel.MainRoute) bool { return k.Dst == r.Dst && (!gw.IsValid() || k.GW == gw) }) {
			diffs = append(diffs, fmt.Errorf("route %s via %s missing on %s", r.Dst, gw, name))
		}
	}
	return diffs
}

func checkHostLink(hc *kernel.Conn, n *network, hostName string, podLink *kernel.Link) []error {
	var diffs []error
	hl, err := hc.Link(hostName)
	if err != nil {
		return []error{fmt.Errorf("host interface %s: %w", hostName, err)}
	}
	br, err := hc.Link(n.bridge)
	if err != nil {
		return []error{fmt.Errorf("bridge %s: %w", n.bridge, err)}
	}
	if hl.Master != br.Index {
		diffs = append(diffs, fmt.Errorf("host interface %s is not a port of %s", hostName, n.bridge))
	}
	if podLink != nil && podLink.Parent != hl.Index {
		diffs = append(diffs, fmt.Errorf("host interface %s is not the peer of %s", hostName, podLink.Name))
	}
	if !hl.Up() {
		diffs = append(diffs, fmt.Errorf("host interface %s is down", hostName))
	}
	if n.hairpin {
		if on, err := hc.Hairpin(hl.Index); err == nil && !on {
			diffs = append(diffs, fmt.Errorf("hairpin mode is off on %s", hostName))
		}
	}
	return diffs
}

func checkAllocation(n *network, args *protocol.CmdArgs, want []netip.Prefix) []error {
	store, err := hostlocal.Open(n.dataDir, n.name)
	if err != nil {
		return []error{err}
	}
	defer store.Close()
	have, err := store.Lookup(args.ContainerID, args.IfName)
	if err != nil {
		return []error{err}
	}
	var diffs []error
	for _, p := range want {
		if !slices.Contains(have, p.Addr()) {
			diffs = append(diffs, fmt.Errorf("address %s is not reserved for this attachment in %s", p.Addr(), store.Dir()))
		}
	}
	for _, a := range have {
		if !slices.ContainsFunc(want, func(p netip.Prefix) bool { return p.Addr() == a }) {
			diffs = append(diffs, fmt.Errorf("address %s is reserved for this attachment but not in prevResult", a))
		}
	}
	return diffs
}
