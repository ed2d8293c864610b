package flanneld

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/routes"
)

// vxlanBackend connects peers through a VXLAN device per IP family
// (flannel.<VNI>, flannel-v6.<VNI>), exactly as upstream lays it out, so
// nodes running upstream flannel are peers like any other: per remote
// node a permanent neighbour (its VTEP address, the subnet's .0, → its VTEP
// MAC), an FDB entry (VTEP MAC → its public IP) and an on-link route to its
// subnet via its VTEP address. With DirectRouting, peers on our L2 network
// get a plain host-gw route instead.
type vxlanBackend struct {
	ns   Netns
	cfg  *Config
	ext  *ExtIface
	log  *slog.Logger
	h    *netlink.Handle
	rt   routeSync
	devs []*vxlanDev
	own  Lease // set by Setup
	// csum is whether the devices keep TX checksum offload on
	// (decideTxChecksum), applied on every creation and adoption;
	// report publishes a change of mind (metric).
	csum        txCsumDecision
	report      func(txCsumDecision)
	watchFailed bool
}

type vxlanDev struct {
	name  string
	is4   bool
	mac   net.HardwareAddr
	neigh *routes.NeighTable
	fdb   *routes.FDBTable
}

func newVXLAN(ns Netns, cfg *Config, ext *ExtIface, csum txCsumDecision, report func(txCsumDecision), log *slog.Logger) (_ *vxlanBackend, err error) {
	b := &vxlanBackend{ns: ns, cfg: cfg, ext: ext, csum: csum, report: report, log: log}
	report(csum)
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if b.h, err = ns.Handle(); err != nil {
		return nil, err
	}
	t, err := routes.NewNetlinkTable(string(ns), 0, routes.ProtocolNodenet)
	if err != nil {
		return nil, err
	}
	b.rt = routeSync{table: t, networks: cfg.Networks()}
	for _, is4 := range []bool{true, false} {
		if (is4 && !cfg.EnableIPv4) || (!is4 && !cfg.EnableIPv6) {
			continue
		}
		d := &vxlanDev{name: vxlanDevName(cfg.Backend.VNI, is4), is4: is4}
		b.devs = append(b.devs, d)
		if d.neigh, err = routes.NewNeighTable(string(ns), d.name); err != nil {
			return nil, err
		}
		if d.fdb, err = routes.NewFDBTable(string(ns), d.name); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func vxlanDevName(vni int, is4 bool) string {
	if is4 {
		return fmt.Sprintf("flannel.%d", vni)
	}
	return fmt.Sprintf("flannel-v6.%d", vni)
}

func (b *vxlanBackend) Close() {
	for _, d := range b.devs {
		if d.neigh != nil {
			d.neigh.Close()
		}
		if d.fdb != nil {
			d.fdb.Close()
		}
	}
	if b.rt.table != nil {
		b.rt.table.Close()
	}
	if b.h != nil {
		b.h.Close()
	}
}

// Prepare creates (or adopts) the devices. The VTEP MAC is the one we
// published before, if any, so that peers' neighbour and FDB entries stay
// right across restarts and even a reboot; otherwise the existing device's,
// otherwise a random one.
func (b *vxlanBackend) Prepare(ctx context.Context, self selfInfo) (LocalAttrs, error) {
	attrs := LocalAttrs{BackendType: BackendVXLAN}
	for _, d := range b.devs {
		prev := self.BackendData
		if !d.is4 {
			prev = self.BackendV6Data
		}
		if err := b.ensureDevice(d, prev); err != nil {
			return attrs, err
		}
		data := encodeVXLANData(b.cfg.Backend.VNI, d.mac)
		if d.is4 {
			attrs.BackendData = data
		} else {
			attrs.BackendV6Data = data
		}
	}
	return attrs, nil
}

func (b *vxlanBackend) mtu(is4 bool) int {
	if b.cfg.Backend.MTU > 0 {
		return b.cfg.Backend.MTU
	}
	if is4 {
		return b.ext.MTU - vxlanOverhead
	}
	return b.ext.MTU - vxlan6Overhead
}

func (b *vxlanBackend) spec(d *vxlanDev) *netlink.Vxlan {
	src := b.ext.IP
	if !d.is4 {
		src = b.ext.IPv6
	}
	var srcIP net.IP
	if src.IsValid() {
		srcIP = src.AsSlice()
	}
	return &netlink.Vxlan{
		LinkAttrs:    netlink.LinkAttrs{Name: d.name, HardwareAddr: d.mac, MTU: b.mtu(d.is4)},
		VxlanId:      b.cfg.Backend.VNI,
		VtepDevIndex: b.ext.Index,
		SrcAddr:      srcIP,
		Port:         b.cfg.Backend.Port,
		Learning:     false,
	}
}

// ensureDevice keeps a compatible existing device untouched (a restart must
// not flap the data plane) and replaces an incompatible one.
func (b *vxlanBackend) ensureDevice(d *vxlanDev, prev []byte) error {
	existing, err := b.h.LinkByName(d.name)
	var notFound netlink.LinkNotFoundError
	if err != nil && !errors.As(err, &notFound) {
		return fmt.Errorf("find %s in netns %s: %w", d.name, b.ns, err)
	}
	d.mac = pickMAC(prev, existing)
	want := b.spec(d)
	if existing != nil {
		why := incompatible(existing, want)
		if why == "" {
			return b.adopt(existing, want)
		}
		b.log.Warn("replacing incompatible vxlan device", "dev", d.name, "reason", why)
		if err := b.h.LinkDel(existing); err != nil {
			return fmt.Errorf("delete incompatible %s: %w", d.name, err)
		}
	}
	return b.create(want)
}

func (b *vxlanBackend) create(want *netlink.Vxlan) (err error) {
	if err := b.h.LinkAdd(want); err != nil {
		return fmt.Errorf("create vxlan %s: %w", want.Name, err)
	}
	defer func() {
		if err != nil {
			if l, lerr := b.h.LinkByName(want.Name); lerr == nil {
				_ = b.h.LinkDel(l)
			}
		}
	}()
	if err := b.setTxChecksum(want.Name); err != nil {
		return err
	}
	b.log.Info("created vxlan device", "dev", want.Name, "vni", want.VxlanId, "mac", want.HardwareAddr.String(), "mtu", want.MTU, "port", want.Port, "txChecksumOffload", b.csum.On)
	return nil
}

// setTxChecksum puts dev's TX checksum offload where the decision says,
// touching it only when it differs: a device an older nodenet turned off
// gets it back, one someone turned back on against "off" loses it again.
func (b *vxlanBackend) setTxChecksum(dev string) error {
	if on, err := txChecksum(b.ns, dev, false, false); err == nil && on == b.csum.On {
		return nil
	}
	if _, err := txChecksum(b.ns, dev, true, b.csum.On); err != nil {
		return fmt.Errorf("set tx checksum offload of %s to %v: %w", dev, b.csum.On, err)
	}
	return nil
}

// watchNAT is auto's second half: on a kernel that corrupts NATed VXLAN
// checksums, the first NATed flow to the VXLAN port turns offload off
// until the daemon restarts (turning it back on when the flow ends would
// flap, and the NAT rule is most likely still there).
func (b *vxlanBackend) watchNAT() error {
	if !b.csum.Watch || !b.csum.On {
		return nil
	}
	flow, err := natedVXLANFlow(b.ns, b.cfg.Backend.Port)
	if err != nil || flow == "" {
		return err
	}
	b.csum.On, b.csum.By = false, "nat-detected"
	b.csum.Why = "this node NATs VXLAN packets and " + b.csum.Why + " (flow: " + flow + ")"
	b.log.Warn("turning vxlan tx checksum offload off: outer VXLAN packets are NATed on a kernel that corrupts their checksums with it", "flow", flow)
	b.report(b.csum)
	var errs []error
	for _, d := range b.devs {
		errs = append(errs, b.setTxChecksum(d.name))
	}
	return errors.Join(errs...)
}

// adopt fixes what can change in place: MAC, MTU and TX checksum offload.
func (b *vxlanBackend) adopt(l netlink.Link, want *netlink.Vxlan) error {
	a := l.Attrs()
	if a.HardwareAddr.String() != want.HardwareAddr.String() {
		if err := b.h.LinkSetHardwareAddr(l, want.HardwareAddr); err != nil {
			return fmt.Errorf("set %s mac %s: %w", want.Name, want.HardwareAddr, err)
		}
	}
	if a.MTU != want.MTU {
		if err := b.h.LinkSetMTU(l, want.MTU); err != nil {
			return fmt.Errorf("set %s mtu %d: %w", want.Name, want.MTU, err)
		}
	}
	return b.setTxChecksum(want.Name)
}

func incompatible(l netlink.Link, want *netlink.Vxlan) string {
	v, ok := l.(*netlink.Vxlan)
	switch {
	case !ok:
		return fmt.Sprintf("is a %s device", l.Type())
	case v.VxlanId != want.VxlanId:
		return fmt.Sprintf("VNI %d, want %d", v.VxlanId, want.VxlanId)
	case v.Port != want.Port:
		return fmt.Sprintf("port %d, want %d", v.Port, want.Port)
	case v.VtepDevIndex != want.VtepDevIndex:
		return fmt.Sprintf("underlay device index %d, want %d", v.VtepDevIndex, want.VtepDevIndex)
	case !v.SrcAddr.Equal(want.SrcAddr) && !(len(v.SrcAddr) == 0 && len(want.SrcAddr) == 0):
		return fmt.Sprintf("local address %s, want %s", v.SrcAddr, want.SrcAddr)
	case v.Learning:
		return "learning is on"
	}
	return ""
}

func pickMAC(prev []byte, existing netlink.Link) net.HardwareAddr {
	if d, err := decodeVXLANData(prev); err == nil {
		return net.HardwareAddr(d.VtepMAC)
	}
	if existing != nil && len(existing.Attrs().HardwareAddr) == 6 {
		return existing.Attrs().HardwareAddr
	}
	mac := make(net.HardwareAddr, 6)
	_, _ = rand.Read(mac)
	mac[0] = (mac[0] | 0x02) &^ 0x01 // locally administered unicast
	return mac
}

// Setup gives each device its VTEP address (the subnet's network address
// as a host route, as upstream does), drops any stale one and brings it up.
func (b *vxlanBackend) Setup(ctx context.Context, own Lease) (int, error) {
	b.own = own
	mtu := 0
	for _, d := range b.devs {
		sn := own.Subnet
		if !d.is4 {
			sn = own.IPv6Subnet
		}
		l, err := b.h.LinkByName(d.name)
		if err != nil {
			return 0, fmt.Errorf("find %s: %w", d.name, err)
		}
		if err := b.setAddress(l, netip.PrefixFrom(sn.Addr(), sn.Addr().BitLen())); err != nil {
			return 0, err
		}
		if err := b.h.LinkSetUp(l); err != nil {
			return 0, fmt.Errorf("set %s up: %w", d.name, err)
		}
		if m := l.Attrs().MTU; mtu == 0 || m < mtu {
			mtu = m
		}
	}
	return mtu, nil
}

func (b *vxlanBackend) setAddress(l netlink.Link, want netip.Prefix) error {
	fam := netlink.FAMILY_V4
	if want.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	addrs, err := b.h.AddrList(l, fam)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", l.Attrs().Name, err)
	}
	have := false
	for _, a := range addrs {
		p, ok := ipnetPrefix(a.IPNet)
		switch {
		case !ok || p.Addr().IsLinkLocalUnicast():
		case p == want:
			have = true
		default:
			if err := b.h.AddrDel(l, &a); err != nil {
				return fmt.Errorf("remove stale address %s from %s: %w", p, l.Attrs().Name, err)
			}
		}
	}
	if have {
		return nil
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: want.Addr().AsSlice(), Mask: net.CIDRMask(want.Bits(), want.Addr().BitLen())}}
	if want.Addr().Is6() {
		addr.Flags = syscall.IFA_F_NODAD
	}
	if err := b.h.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("add address %s to %s: %w", want, l.Attrs().Name, err)
	}
	return nil
}

// Sync converges neighbours, FDB entries and routes. Entries for a new or
// changed peer go in before its route; a departed peer's route goes before
// its entries.
func (b *vxlanBackend) Sync(ctx context.Context, peers []Lease) (syncResult, error) {
	var res syncResult
	if err := b.recreateMissing(ctx); err != nil {
		return res, err
	}
	if err := b.watchNAT(); err != nil {
		// Once per run: a kernel without conntrack would say it every sync.
		level := slog.LevelDebug
		if !b.watchFailed {
			level, b.watchFailed = slog.LevelWarn, true
		}
		b.log.Log(ctx, level, "look for NATed VXLAN flows", "err", err)
	}
	var want []wantRoute
	neigh := map[*vxlanDev][]routes.Neigh{}
	fdb := map[*vxlanDev][]routes.FDBEntry{}
	for _, p := range peers {
		if p.BackendType != BackendVXLAN {
			res.PeerErrors = append(res.PeerErrors, fmt.Errorf("peer %s: backend-type %q, this node runs vxlan", p.Node, p.BackendType))
			continue
		}
		res.Peers++
		for _, f := range peerFamilies(b.cfg, p) {
			d := b.dev(f.is4)
			if err := f.check(p.Node); err != nil {
				res.PeerErrors = append(res.PeerErrors, err)
				continue
			}
			if b.cfg.Backend.DirectRouting && b.ext.OnLink(f.public) {
				want = append(want, wantRoute{Route: routes.Route{Dst: f.subnet, Gw: f.public, Dev: b.ext.Name}})
				continue
			}
			data, err := decodeVXLANData(f.data)
			if err != nil {
				res.PeerErrors = append(res.PeerErrors, fmt.Errorf("peer %s: %w", p.Node, err))
				continue
			}
			if data.VNI != 0 && data.VNI != b.cfg.Backend.VNI {
				res.PeerErrors = append(res.PeerErrors, fmt.Errorf("peer %s: VNI %d, this node uses %d", p.Node, data.VNI, b.cfg.Backend.VNI))
				continue
			}
			vtep := f.subnet.Addr()
			neigh[d] = append(neigh[d], routes.Neigh{IP: vtep, MAC: net.HardwareAddr(data.VtepMAC)})
			fdb[d] = append(fdb[d], routes.FDBEntry{MAC: net.HardwareAddr(data.VtepMAC), Dst: f.public})
			want = append(want, wantRoute{Route: routes.Route{Dst: f.subnet, Gw: vtep, Dev: d.name}, onLink: true})
		}
	}
	var errs []error
	type dels struct {
		neigh []routes.Neigh
		fdb   []routes.FDBEntry
	}
	pending := map[*vxlanDev]dels{}
	for _, d := range b.devs {
		nd, fd, err := b.setEntries(ctx, d, neigh[d], fdb[d])
		if err != nil {
			errs = append(errs, err)
		}
		pending[d] = dels{nd, fd}
		res.Neighbours += len(neigh[d])
		res.FDB += len(fdb[d])
	}
	if err := b.rt.apply(ctx, want); err != nil {
		errs = append(errs, err)
	}
	res.Routes = len(want)
	for d, p := range pending {
		for _, n := range p.neigh {
			if err := d.neigh.Delete(ctx, n); err != nil && !errors.Is(err, routes.ErrNotFound) {
				errs = append(errs, err)
			}
		}
		for _, e := range p.fdb {
			if err := d.fdb.Delete(ctx, e); err != nil && !errors.Is(err, routes.ErrNotFound) {
				errs = append(errs, err)
			}
		}
	}
	return res, errors.Join(errs...)
}

// setEntries applies the sets and returns the deletes for later.
func (b *vxlanBackend) setEntries(ctx context.Context, d *vxlanDev, neigh []routes.Neigh, fdb []routes.FDBEntry) ([]routes.Neigh, []routes.FDBEntry, error) {
	curN, err := d.neigh.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	curF, err := d.fdb.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	setN, delN := routes.DiffNeigh(neigh, curN)
	setF, delF := routes.DiffFDB(fdb, curF)
	var errs []error
	for _, n := range setN {
		if err := d.neigh.Set(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	for _, e := range setF {
		if err := d.fdb.Set(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	return delN, delF, errors.Join(errs...)
}

// recreateMissing brings back a device someone deleted under us, with the
// MAC we published, so peers need not even notice.
func (b *vxlanBackend) recreateMissing(ctx context.Context) error {
	for _, d := range b.devs {
		_, err := b.h.LinkByName(d.name)
		var notFound netlink.LinkNotFoundError
		if !errors.As(err, &notFound) {
			continue
		}
		b.log.Warn("vxlan device vanished; recreating it", "dev", d.name)
		if err := b.ensureDevice(d, encodeVXLANData(b.cfg.Backend.VNI, d.mac)); err != nil {
			return err
		}
		if _, err := b.Setup(ctx, b.own); err != nil {
			return err
		}
	}
	return nil
}

func (b *vxlanBackend) dev(is4 bool) *vxlanDev {
	for _, d := range b.devs {
		if d.is4 == is4 {
			return d
		}
	}
	return nil
}
