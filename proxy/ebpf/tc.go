package ebpf

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/proxy"
)

// The tc object's copies of the shared map types must be the socket
// programs' layouts: these conversions stop compiling if bpf/tcnat.c and
// bpf/socklb.c drift apart.
var (
	_ = svcKey(tcnatSvcKey{})
	_ = svcValue(tcnatSvcValue{})
	_ = backendKey(tcnatBackendKey{})
	_ = addrPort(tcnatAddrport{})
)

// Flags of the services map the tc programs read (bpf/tcnat.c).
const (
	flagKeepSource = 2 // externalTrafficPolicy Local: no SNAT
	flagSrcRanges  = 4 // loadBalancerSourceRanges: src_ranges lists the allowed sources
)

// tcProgs is each family's ingress program.
var tcProgs = map[proxy.Family]string{proxy.IPv4: tcnatProgTcIn4, proxy.IPv6: tcnatProgTcIn6}

// natTable is the nftables table that turns on the kernel's conntrack and
// NAT hooks in the node's namespace: the tc program creates conntrack
// entries with their NAT set up, but a namespace tracks and translates
// packets only once something asks for it. nf_nat registers its hooks (all
// four) with the namespace's first NAT chain; conntrack's hooks come with
// the first rule that reads conntrack state (a chain alone does not: the
// translation silently does not happen). So: one NAT base chain with one
// rule, `ct state new`, which decides nothing. A NAT chain is walked only
// for a flow's first packet and never for the flows the tc program set up
// (their NAT is already done), so the per-packet cost is conntrack's own.
func natTable(f proxy.Family) (family, name string) {
	if f == proxy.IPv6 {
		return "ip6", "nodenet-ebpf"
	}
	return "ip", "nodenet-ebpf"
}

// tcLinkPin is where the TCX link of one interface is pinned.
func (d *DataPlane) tcLinkPin(ifName string) string {
	return filepath.Join(d.cfg.PinDir, "link-"+tcProgs[d.cfg.Family]+"-"+ifName)
}

// inNetNS runs fn in Config.NetNS ("" is the process's own namespace).
func (d *DataPlane) inNetNS(fn func() error) error { return inNetNSPath(d.cfg.NetNS, fn) }

// loadTC loads the tc program against the pinned maps (the socket
// programs' collection created them), registers the NAT hooks, writes each
// interface's SNAT address and attaches the program to every interface in
// Config.Interfaces, updating pinned links in place. It returns the tc
// path's maps the sync writes.
func (d *DataPlane) loadTC() (srcRanges *ebpf.Map, err error) {
	if len(d.cfg.Interfaces) == 0 && d.cfg.FollowNode == nil {
		return nil, nil
	}
	spec, err := loadTcnat()
	if err != nil {
		return nil, err
	}
	name := tcProgs[d.cfg.Family]
	for p := range spec.Programs {
		if p != name {
			delete(spec.Programs, p)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: d.cfg.PinDir}})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load BPF program %s (the verifier's last lines follow): %+v", name, ve)
		}
		return nil, fmt.Errorf("load BPF program %s with the maps pinned in %s: %w", name, d.cfg.PinDir, err)
	}
	attached := map[string]uint32{}
	defer func() {
		// Following the node's interfaces attaches later: keep what that
		// needs (tcfollow.go).
		follow := err == nil && d.cfg.FollowNode != nil
		if follow {
			d.follow = &tcFollow{choice: *d.cfg.FollowNode, prog: coll.Programs[name], snat: coll.Maps[tcnatMapSnatAddrs],
				ifaces: attached}
		} else {
			coll.Programs[name].Close()
		}
		for n, m := range coll.Maps {
			if err == nil && (n == tcnatMapSrcRanges || follow && n == tcnatMapSnatAddrs) {
				continue
			}
			m.Close()
		}
	}()
	if err := d.inNetNS(func() error { return d.natHooks() }); err != nil {
		return nil, err
	}
	ifaces := d.cfg.Interfaces
	err = d.inNetNS(func() error {
		if d.cfg.FollowNode != nil {
			// A reload (a repair after lost pins) attaches where the node
			// is now, not where it was when the process started.
			links, err := listLinkAddrs()
			if err != nil {
				return fmt.Errorf("choose tc interfaces: %w", err)
			}
			ifaces = d.cfg.FollowNode.choose(links)
		}
		for _, ifName := range ifaces {
			idx, err := d.attachTCProg(coll.Programs[name], coll.Maps[tcnatMapSnatAddrs], ifName)
			if err != nil {
				return err
			}
			attached[ifName] = idx
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := d.dropStaleTCLinks(ifaces); err != nil {
		return nil, err
	}
	return coll.Maps[tcnatMapSrcRanges], nil
}

// natHooks creates natTable with its one empty NAT chain (idempotent).
func (d *DataPlane) natHooks() error {
	fam, table := natTable(d.cfg.Family)
	script := fmt.Sprintf("add table %[1]s %[2]s\n"+
		"add chain %[1]s %[2]s nat-hooks { type nat hook prerouting priority dstnat; policy accept; }\n"+
		"flush chain %[1]s %[2]s nat-hooks\n"+
		"add rule %[1]s %[2]s nat-hooks ct state new\n", fam, table)
	if out, err := nft(script); err != nil {
		return fmt.Errorf("register the kernel's NAT hooks (nft table %s %s): %w: %s", fam, table, err, out)
	}
	return nil
}

func nft(script string) ([]byte, error) {
	bin, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("the tc path needs nft: %w", err)
	}
	cmd := exec.Command(bin, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	return cmd.CombinedOutput()
}

// writeSNAT writes ifName's node address into snat_addrs; it returns the
// interface's index.
func (d *DataPlane) writeSNAT(snat *ebpf.Map, ifName string) (uint32, error) {
	ifc, err := netlink.LinkByName(ifName)
	if err != nil {
		return 0, fmt.Errorf("tc interface %s: %w", ifName, err)
	}
	idx := uint32(ifc.Attrs().Index)
	addr, err := nodeAddr(ifc, d.cfg.Family)
	if err != nil {
		return 0, err
	}
	val := addrPort{Addr: addrWords(addr)}
	if err := snat.Update(&idx, &val, ebpf.UpdateAny); err != nil {
		return 0, fmt.Errorf("write SNAT address of %s: %w", ifName, err)
	}
	return idx, nil
}

// attachTCProg writes ifName's SNAT address and attaches (or re-points) its
// link; it returns the interface's index. It runs in the interfaces'
// namespace: a TCX link names its interface by index in the caller's
// namespace.
func (d *DataPlane) attachTCProg(prog *ebpf.Program, snat *ebpf.Map, ifName string) (uint32, error) {
	idx, err := d.writeSNAT(snat, ifName)
	if err != nil {
		return 0, err
	}
	return idx, d.linkTC(prog, ifName, idx)
}

// linkTC attaches prog to ifName's (index idx) TCX ingress under its pin,
// or re-points the pinned link.
func (d *DataPlane) linkTC(prog *ebpf.Program, ifName string, idx uint32) error {
	pin := d.tcLinkPin(ifName)
	l, err := link.LoadPinnedLink(pin, nil)
	switch {
	case err == nil:
		defer l.Close()
		info, ierr := l.Info()
		if ierr == nil && info.TCX() != nil && info.TCX().Ifindex == idx {
			if err := l.Update(prog); err != nil {
				return fmt.Errorf("update pinned link %s: %w", pin, err)
			}
			return nil
		}
		// The interface was re-created (another index): the old link
		// went with it.
		if err := l.Unpin(); err != nil {
			return fmt.Errorf("unpin stale link %s: %w", pin, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("open pinned link %s: %w", pin, err)
	}
	l, err = link.AttachTCX(link.TCXOptions{Interface: int(idx), Program: prog, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return fmt.Errorf("attach %s to %s ingress: %w", prog, ifName, err)
	}
	defer l.Close() // the pin keeps it attached
	if err := l.Pin(pin); err != nil {
		_ = l.Unpin()
		return fmt.Errorf("pin link %s: %w", pin, err)
	}
	return nil
}

// nodeAddr is the first global address of family f on ifc: the source the
// node's replies and SNATed flows use.
func nodeAddr(ifc netlink.Link, f proxy.Family) (netip.Addr, error) {
	fam := netlink.FAMILY_V4
	if f == proxy.IPv6 {
		fam = netlink.FAMILY_V6
	}
	addrs, err := netlink.AddrList(ifc, fam)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("addresses of %s: %w", ifc.Attrs().Name, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
			return ip.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("tc interface %s has no global %s address to SNAT to", ifc.Attrs().Name, f)
}

// dropStaleTCLinks detaches the links of interfaces not in ifaces (no
// longer configured or chosen).
func (d *DataPlane) dropStaleTCLinks(ifaces []string) error {
	want := map[string]bool{}
	for _, ifName := range ifaces {
		want[d.tcLinkPin(ifName)] = true
	}
	pins, err := filepath.Glob(d.tcLinkPin("*"))
	if err != nil {
		return err
	}
	for _, p := range pins {
		if want[p] {
			continue
		}
		if err := unpinLink(p); err != nil {
			return err
		}
	}
	return nil
}

func unpinLink(pin string) error {
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		return fmt.Errorf("open pinned link %s: %w", pin, err)
	}
	defer l.Close()
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("unpin link %s: %w", pin, err)
	}
	return nil
}

// tcIntact reports whether every attached interface's link pin exists.
func (d *DataPlane) tcIntact() bool {
	for _, ifName := range d.tcInterfaces() {
		if _, err := os.Stat(d.tcLinkPin(ifName)); err != nil {
			return false
		}
	}
	return true
}

// cleanupTC removes natTable (the links go with the pin directory) if the
// tc path was on here: interfaces configured or tc links pinned, so a
// data plane that never had it runs no nft at all. Conntrack entries the
// program created stay until they expire; without the NAT hooks they
// translate nothing.
func (d *DataPlane) cleanupTC() error {
	if pins, _ := filepath.Glob(d.tcLinkPin("*")); len(d.cfg.Interfaces) == 0 && len(pins) == 0 {
		return nil
	}
	fam, table := natTable(d.cfg.Family)
	if d.cfg.NetNS != "" {
		if _, err := os.Stat(d.cfg.NetNS); errors.Is(err, os.ErrNotExist) {
			return nil // the namespace, and its table, are gone
		}
	}
	return d.inNetNS(func() error {
		out, err := nft(fmt.Sprintf("delete table %s %s\n", fam, table))
		if err != nil && !bytes.Contains(out, []byte("No such file")) {
			if errors.Is(err, exec.ErrNotFound) {
				return nil // no nft, so no table either
			}
			return fmt.Errorf("delete nft table %s %s: %w: %s", fam, table, err, out)
		}
		return nil
	})
}

// srcKey is one allowed source prefix of entry point id in src_ranges.
func srcKey(id uint32, p netip.Prefix) tcnatSrcKey {
	return tcnatSrcKey{Prefixlen: 32 + uint32(p.Bits()), Id: id, Addr: addrWords(p.Masked().Addr())}
}

// withSourceRanges restricts a LoadBalancer IP entry point to
// loadBalancerSourceRanges (of family f; ranges of only the other family
// leave no source allowed, as the iptables mode's DROP does).
func withSourceRanges(e entry, f proxy.Family, ranges []netip.Prefix) entry {
	if len(ranges) == 0 {
		return e
	}
	e.flags |= flagSrcRanges
	e.ranges = familyPrefixes(f, ranges)
	return e
}

// familyPrefixes are the prefixes of family f in ps, masked.
func familyPrefixes(f proxy.Family, ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if f.Contains(p.Addr()) {
			out = append(out, p.Masked())
		}
	}
	return out
}
