package cni

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// Check implements CHECK: it compares the kernel and the allocation store
// with prevResult and reports every difference it finds.
func (p *Plugin) Check(ctx context.Context, args *CmdArgs) error {
	c, log, done, err := p.start(args, true)
	if err != nil {
		return err
	}
	defer done()
	if c.PrevResult == nil {
		return errorf(CodeInvalidConfig, "CHECK needs prevResult")
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
			return withCode(CodeIO, err)
		}
		if conf == nil {
			return errorf(CodeUnknownContainer, "no delegate cache %s for container %s", cachePath(c.DataDir, args.ContainerID), args.ContainerID)
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

func check(n *network, args *CmdArgs, prev *Result) error {
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
		return errorf(CodeInvalidConfig, "prevResult has no interface %s in %s", args.IfName, args.Netns)
	}
	var want []netip.Prefix
	for _, ip := range prev.IPs {
		if ip.Interface != nil && *ip.Interface == podIdx {
			want = append(want, ip.Address)
		}
	}

	podNS, err := openNetNS(args.Netns)
	if err != nil {
		return errorf(CodeBadEnv, "CNI_NETNS %q: %w", args.Netns, err)
	}
	defer podNS.Close()
	pc, err := rtnlSocket(podNS)
	if err != nil {
		return err
	}
	defer pc.Close()
	hc, err := rtnlSocket(nil)
	if err != nil {
		return err
	}
	defer hc.Close()

	var diffs []error
	podLink, err := pc.getLink(args.IfName, 0)
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

func checkPodLink(pc *rtnlConn, l *link, n *network, itf *Interface, want []netip.Prefix, prev *Result) []error {
	var diffs []error
	name := l.name
	if l.kind != "veth" {
		diffs = append(diffs, fmt.Errorf("%s is a %s, not a veth", name, l.kind))
	}
	if itf.Mac != "" && l.mac.String() != itf.Mac {
		diffs = append(diffs, fmt.Errorf("%s has MAC %s, prevResult says %s", name, l.mac, itf.Mac))
	}
	if l.mtu != n.mtu {
		diffs = append(diffs, fmt.Errorf("%s has MTU %d, want %d", name, l.mtu, n.mtu))
	}
	if !l.up() {
		diffs = append(diffs, fmt.Errorf("%s is down", name))
	}
	have, err := pc.listAddrs(l.index)
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
	routes, err := pc.listRoutes(l.index)
	if err != nil {
		return append(diffs, err)
	}
	for _, r := range prev.Routes {
		gw := routeGateway(r, allocs)
		if !slices.ContainsFunc(routes, func(k kernelRoute) bool { return k.dst == r.Dst && (!gw.IsValid() || k.gw == gw) }) {
			diffs = append(diffs, fmt.Errorf("route %s via %s missing on %s", r.Dst, gw, name))
		}
	}
	return diffs
}

func checkHostLink(hc *rtnlConn, n *network, hostName string, podLink *link) []error {
	var diffs []error
	hl, err := hc.getLink(hostName, 0)
	if err != nil {
		return []error{fmt.Errorf("host interface %s: %w", hostName, err)}
	}
	br, err := hc.getLink(n.bridge, 0)
	if err != nil {
		return []error{fmt.Errorf("bridge %s: %w", n.bridge, err)}
	}
	if hl.master != br.index {
		diffs = append(diffs, fmt.Errorf("host interface %s is not a port of %s", hostName, n.bridge))
	}
	if podLink != nil && podLink.parent != hl.index {
		diffs = append(diffs, fmt.Errorf("host interface %s is not the peer of %s", hostName, podLink.name))
	}
	if !hl.up() {
		diffs = append(diffs, fmt.Errorf("host interface %s is down", hostName))
	}
	if n.hairpin {
		if on, err := hc.hairpin(hl.index); err == nil && !on {
			diffs = append(diffs, fmt.Errorf("hairpin mode is off on %s", hostName))
		}
	}
	return diffs
}

func checkAllocation(n *network, args *CmdArgs, want []netip.Prefix) []error {
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
