package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// Check implements CHECK: it compares the kernel and the allocation store
// with prevResult and reports every difference it finds.
func (p *Plugin) Check(ctx context.Context, args *skel.CmdArgs) error {
	c, err := ParseConfig(args.StdinData)
	if err != nil {
		return err
	}
	log, done := p.logger(c, args)
	defer done()
	if err := validateArgs(args); err != nil {
		return err
	}
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
	prev, err := current.NewResultFromResult(c.PrevResult)
	if err != nil {
		return errorf(CodeDecode, "convert prevResult: %w", err)
	}
	if err := check(n, args, prev); err != nil {
		log.Warn("CHECK failed", "err", err)
		return err
	}
	return nil
}

func check(n *network, args *skel.CmdArgs, prev *current.Result) error {
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
			if p, ok := ipNetToPrefix(ip.Address); ok {
				want = append(want, p)
			}
		}
	}

	podNS, ph, err := openPod(args.Netns)
	if err != nil {
		return errorf(CodeBadEnv, "CNI_NETNS %q: %w", args.Netns, err)
	}
	defer podNS.Close()
	defer ph.Close()
	host, err := openHost()
	if err != nil {
		return err
	}
	defer host.Close()

	var diffs []error
	podLink, err := ph.LinkByName(args.IfName)
	if err != nil {
		diffs = append(diffs, fmt.Errorf("interface %s: %w", args.IfName, err))
	} else {
		diffs = append(diffs, checkPodLink(ph, podLink, n, prev.Interfaces[podIdx], want, prev)...)
	}
	if hostIdx >= 0 {
		diffs = append(diffs, checkHostLink(host, n, prev.Interfaces[hostIdx].Name, podLink)...)
	}
	diffs = append(diffs, checkAllocation(n, args, want)...)
	if err := errors.Join(diffs...); err != nil {
		return fmt.Errorf("check %s %s: %w", args.ContainerID, args.IfName, err)
	}
	return nil
}

func checkPodLink(ph *netlink.Handle, l netlink.Link, n *network, itf *current.Interface, want []netip.Prefix, prev *current.Result) []error {
	var diffs []error
	name := l.Attrs().Name
	if l.Type() != "veth" {
		diffs = append(diffs, fmt.Errorf("%s is a %s, not a veth", name, l.Type()))
	}
	if itf.Mac != "" && l.Attrs().HardwareAddr.String() != itf.Mac {
		diffs = append(diffs, fmt.Errorf("%s has MAC %s, prevResult says %s", name, l.Attrs().HardwareAddr, itf.Mac))
	}
	if l.Attrs().MTU != n.mtu {
		diffs = append(diffs, fmt.Errorf("%s has MTU %d, want %d", name, l.Attrs().MTU, n.mtu))
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		diffs = append(diffs, fmt.Errorf("%s is down", name))
	}
	addrs, err := dump("addresses of "+name, func() ([]netlink.Addr, error) { return ph.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return append(diffs, err)
	}
	var have []netip.Prefix
	for _, a := range addrs {
		if p, ok := ipNetToPrefix(*a.IPNet); ok {
			have = append(have, p)
		}
	}
	var allocs []hostlocal.Allocation
	for _, ip := range prev.IPs {
		p, ok := ipNetToPrefix(ip.Address)
		if !ok {
			continue
		}
		gw, _ := netip.AddrFromSlice(ip.Gateway)
		allocs = append(allocs, hostlocal.Allocation{Address: p, Gateway: gw.Unmap()})
	}
	for _, p := range want {
		if !slices.Contains(have, p) {
			diffs = append(diffs, fmt.Errorf("address %s missing on %s", p, name))
		}
	}
	routes, err := dump("routes", func() ([]netlink.Route, error) { return ph.RouteList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return append(diffs, err)
	}
	for _, r := range prev.Routes {
		gw := routeGateway(r, allocs)
		if !slices.ContainsFunc(routes, func(k netlink.Route) bool { return sameRoute(k, r.Dst, gw) }) {
			diffs = append(diffs, fmt.Errorf("route %s via %s missing on %s", r.Dst.String(), gw, name))
		}
	}
	return diffs
}

func sameRoute(k netlink.Route, dst net.IPNet, gw net.IP) bool {
	kd, _ := netlink.ParseIPNet("0.0.0.0/0")
	if dst.IP.To4() == nil {
		kd, _ = netlink.ParseIPNet("::/0")
	}
	if k.Dst != nil {
		kd = k.Dst
	}
	return kd.String() == dst.String() && (gw == nil || k.Gw.Equal(gw))
}

func checkHostLink(h *netlink.Handle, n *network, hostName string, podLink netlink.Link) []error {
	var diffs []error
	hl, err := h.LinkByName(hostName)
	if err != nil {
		return []error{fmt.Errorf("host interface %s: %w", hostName, err)}
	}
	br, err := h.LinkByName(n.bridge)
	if err != nil {
		return []error{fmt.Errorf("bridge %s: %w", n.bridge, err)}
	}
	if hl.Attrs().MasterIndex != br.Attrs().Index {
		diffs = append(diffs, fmt.Errorf("host interface %s is not a port of %s", hostName, n.bridge))
	}
	if podLink != nil && podLink.Attrs().ParentIndex != hl.Attrs().Index {
		diffs = append(diffs, fmt.Errorf("host interface %s is not the peer of %s", hostName, podLink.Attrs().Name))
	}
	if hl.Attrs().Flags&net.FlagUp == 0 {
		diffs = append(diffs, fmt.Errorf("host interface %s is down", hostName))
	}
	if n.hairpin {
		if pi, err := h.LinkGetProtinfo(hl); err == nil && !pi.Hairpin {
			diffs = append(diffs, fmt.Errorf("hairpin mode is off on %s", hostName))
		}
	}
	return diffs
}

func checkAllocation(n *network, args *skel.CmdArgs, want []netip.Prefix) []error {
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
