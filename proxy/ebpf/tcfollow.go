package ebpf

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// NodeAddrChoice is what --bpf-tc-interfaces=auto chooses the tc
// interfaces by (Config.FollowNode): the links holding one of NodeAddrs
// (the Node's InternalIP and ExternalIP) or a local address in one of
// CIDRs (--nodeport-addresses'), as SelectInterfaces filters them.
type NodeAddrChoice struct {
	NodeAddrs []netip.Addr
	CIDRs     []netip.Prefix
}

// choose applies c to the namespace's links.
func (c NodeAddrChoice) choose(links []LinkAddrs) []string {
	addrs := slices.Clone(c.NodeAddrs)
	for _, l := range links {
		for _, a := range l.Addrs {
			if slices.ContainsFunc(c.CIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
				addrs = append(addrs, a)
			}
		}
	}
	return SelectInterfaces(links, addrs)
}

// tcFollow keeps the tc interfaces of --bpf-tc-interfaces=auto current:
// after every address change of the node namespace (the watcher of
// localaddrs.go) the choice is made again, a link that now holds a node
// address gets the program (pinned link, SNAT address) and one that lost
// it, or is gone, is detached and unpinned. It owns the program and the
// snat_addrs handle for that.
type tcFollow struct {
	choice NodeAddrChoice
	prog   *ebpf.Program
	snat   *ebpf.Map

	mu     sync.Mutex
	ifaces map[string]uint32 // attached: name → ifindex
}

// tcChanges counts the interfaces --bpf-tc-interfaces=auto attached and
// detached after the start (nodenet_proxy_ebpf_tc_interface_changes_total).
type tcChanges struct{ attached, detached atomic.Int64 }

// listLinkAddrs reads the links of the calling thread's namespace and
// their addresses.
func listLinkAddrs() ([]LinkAddrs, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var all []LinkAddrs
	for _, l := range links {
		attrs := l.Attrs()
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", attrs.Name, err)
		}
		la := LinkAddrs{Name: attrs.Name, Loopback: attrs.Flags&net.FlagLoopback != 0}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				la.Addrs = append(la.Addrs, ip.Unmap())
			}
		}
		all = append(all, la)
	}
	return all, nil
}

// followInterfaces makes the attached tc interfaces the choice's for the
// namespace's links now. It runs on the address watcher's goroutine (never
// under d.mu) and logs and counts each change.
func (d *DataPlane) followInterfaces() {
	f := d.follow
	f.mu.Lock()
	defer f.mu.Unlock()
	err := d.inNetNS(func() error {
		links, err := listLinkAddrs()
		if err != nil {
			return err
		}
		want := f.choice.choose(links)
		for name, idx := range f.ifaces {
			if slices.Contains(want, name) {
				// Its address may be another now: SNAT to the current one.
				if _, err := d.writeSNAT(f.snat, name); err != nil {
					d.log.Warn("refresh the SNAT address of a tc interface", "interface", name, "err", err)
				}
				continue
			}
			if err := d.detachTC(name, idx); err != nil {
				d.log.Error("detach tc program from an interface without node address", "interface", name, "err", err)
				continue
			}
			delete(f.ifaces, name)
			d.tcChanges.detached.Add(1)
			d.log.Info("tc interface detached: it holds no node address any more", "interface", name, "interfaces", slices.Sorted(maps.Keys(f.ifaces)))
		}
		for _, name := range want {
			if _, ok := f.ifaces[name]; ok {
				continue
			}
			idx, err := d.attachTCProg(f.prog, f.snat, name)
			if err != nil {
				d.log.Error("attach tc program to an interface that gained a node address", "interface", name, "err", err)
				continue
			}
			f.ifaces[name] = idx
			d.tcChanges.attached.Add(1)
			d.log.Info("tc interface attached: it holds a node address", "interface", name, "interfaces", slices.Sorted(maps.Keys(f.ifaces)))
		}
		return nil
	})
	if err != nil {
		d.log.Error("follow the node's interfaces for the tc path", "err", err)
	}
}

// detachTC unpins ifName's link (the last reference: the kernel detaches
// it; an interface already gone took it along) and forgets its SNAT
// address.
func (d *DataPlane) detachTC(ifName string, idx uint32) error {
	if err := unpinLink(d.tcLinkPin(ifName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := d.follow.snat.Delete(&idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("forget the SNAT address of %s: %w", ifName, err)
	}
	return nil
}

// tcInterfaces are the interfaces the tc program is on now: the
// configured ones, or the followed choice's.
func (d *DataPlane) tcInterfaces() []string {
	if d.follow == nil {
		return d.cfg.Interfaces
	}
	d.follow.mu.Lock()
	defer d.follow.mu.Unlock()
	return slices.Sorted(maps.Keys(d.follow.ifaces))
}

func (f *tcFollow) close() {
	if f == nil {
		return
	}
	f.prog.Close()
	f.snat.Close()
}
