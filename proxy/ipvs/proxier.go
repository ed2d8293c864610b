package ipvs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/proxy"
)

// Config is the ipvs mode's part of `nodenet proxy`'s flags.
type Config struct {
	// Scheduler is --ipvs-scheduler, for Services without the
	// proxy.SchedulerAnnotation (default "rr").
	Scheduler string
	// Timeouts are --ipvs-tcp-timeout, --ipvs-tcpfin-timeout and
	// --ipvs-udp-timeout (0: leave the kernel's).
	Timeouts Timeouts
	// GracefulTimeout bounds how long a removed real server is kept at
	// weight 0 while its connections drain (default 15 minutes).
	GracefulTimeout time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// DefaultGracefulTimeout is Config.GracefulTimeout's default.
const DefaultGracefulTimeout = 15 * time.Minute

// Validate refuses what the kernel would refuse later.
func (c Config) Validate() error {
	var errs []error
	if c.Scheduler != "" && !slices.Contains(Schedulers, c.Scheduler) {
		errs = append(errs, fmt.Errorf("--ipvs-scheduler=%q: unknown scheduler (want one of %v)", c.Scheduler, Schedulers))
	}
	for name, v := range map[string]time.Duration{"--ipvs-tcp-timeout": c.Timeouts.TCP, "--ipvs-tcpfin-timeout": c.Timeouts.TCPFin, "--ipvs-udp-timeout": c.Timeouts.UDP} {
		if v < 0 || v%time.Second != 0 {
			errs = append(errs, fmt.Errorf("%s=%v: must be a whole, non-negative number of seconds", name, v))
		}
	}
	return errors.Join(errs...)
}

// Proxier is the ipvs data plane of one family.
type Proxier struct {
	family proxy.Family
	ipvs   Handle
	host   Host
	cfg    Config
	log    *slog.Logger

	mu sync.Mutex
	// programmed are the entries each service port got at the last sync.
	programmed map[proxy.ServicePortName][]entry
	// draining are removed real servers kept at weight 0 until their
	// connections end or their deadline passes.
	draining map[ServiceKey]map[netip.AddrPort]time.Time
	// timeoutsSet: the configured timeouts were written.
	timeoutsSet bool
	// nodePorts are the virtual servers on node addresses nodenet made,
	// kept in the table's nodeports set (read back at the first sync, so
	// a restarted proxy knows its predecessor's); nodePortsRead: it was.
	nodePorts     map[ServiceKey]bool
	nodePortsRead bool
	// table is the nft table as the last sync wrote it, and vips the
	// device's addresses after it: a partial sync writes the difference
	// to them (nil: unknown, so the table is rewritten and the device's
	// addresses listed).
	table *table
	vips  map[netip.Addr]bool
}

// New is the data plane over an IPVS handle and a host (both in the node's
// network namespace).
func New(f proxy.Family, h Handle, host Host, cfg Config, log *slog.Logger) *Proxier {
	if cfg.Scheduler == "" {
		cfg.Scheduler = "rr"
	}
	if cfg.GracefulTimeout == 0 {
		cfg.GracefulTimeout = DefaultGracefulTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Proxier{family: f, ipvs: h, host: host, cfg: cfg, log: log,
		programmed: map[proxy.ServicePortName][]entry{}, draining: map[ServiceKey]map[netip.AddrPort]time.Time{}}
}

// Name implements proxy.DataPlane.
func (p *Proxier) Name() string { return "ipvs" }

// nodeAddrs is where NodePorts listen.
func (p *Proxier) nodeAddrs(snap *proxy.Snapshot) ([]netip.Addr, error) {
	if !snap.NodePorts.All {
		return snap.NodePorts.Addrs, nil
	}
	return p.host.NodeAddrs(p.family)
}

// Sync implements proxy.DataPlane: the nft table is rewritten in one
// transaction; virtual and real servers of the changed service ports are
// brought to the snapshot one by one (IPVS has no transactions; each step
// is idempotent, so a failed sync is completed by the full sync that
// follows).
func (p *Proxier) Sync(ctx context.Context, snap *proxy.Snapshot, changed proxy.ChangeSet) (proxy.SyncResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var res proxy.SyncResult
	// A device (re)made here holds none of the VIPs the last sync left.
	if ok, err := p.host.DeviceExists(); err != nil || !ok {
		p.vips = nil
	}
	if err := p.host.EnsureDevice(); err != nil {
		return res, err
	}
	if !p.timeoutsSet && p.cfg.Timeouts != (Timeouts{}) {
		if err := p.ipvs.SetTimeouts(p.cfg.Timeouts); err != nil {
			return res, err
		}
		p.timeoutsSet = true
	}
	nodeAddrs, err := p.nodeAddrs(snap)
	if err != nil {
		return res, err
	}
	// Every entry of the snapshot: the nft sets and the VIPs are written
	// whole; IPVS is touched only for the ports to rewrite.
	want := map[proxy.ServicePortName][]entry{}
	var all []entry
	for n, sp := range snap.Services {
		es := entries(sp, nodeAddrs, p.cfg.Scheduler)
		want[n] = es
		all = append(all, es...)
	}
	var ports []proxy.ServicePortName
	if changed.Full {
		for n := range want {
			ports = append(ports, n)
		}
		for n := range p.programmed {
			if _, ok := want[n]; !ok {
				ports = append(ports, n)
			}
		}
		slices.SortFunc(ports, proxy.ServicePortName.Compare)
	} else {
		ports = proxy.SortedPorts(changed, p.programmed, snap)
	}
	// Virtual servers on a VIP the device holds now, or on a node
	// address, are nodenet's: a full sync removes those not wanted.
	bound, err := p.boundVIPs(changed.Full)
	if err != nil {
		return res, err
	}
	if err := p.syncVIPs(bound, bindAddrs(all)); err != nil {
		return res, err
	}
	current, err := p.ipvs.Services()
	if err != nil {
		return res, err
	}
	have := map[ServiceKey]Service{}
	for _, s := range current {
		have[s.Key()] = s
	}
	wanted := map[ServiceKey]bool{}
	for _, es := range want {
		for _, e := range es {
			if len(e.dests) > 0 {
				wanted[e.svc.Key()] = true
			}
		}
	}
	record, err := p.recordNodePorts(ctx, all, have)
	if err != nil {
		return res, err
	}
	// The record is written before the virtual servers it names are
	// made, so whatever this sync leaves behind is recorded.
	if err := p.syncTable(ctx, desiredTable(p.family, snap, all, record), changed.Full); err != nil {
		return res, err
	}
	for _, n := range ports {
		for _, e := range p.programmed[n] {
			if k := e.svc.Key(); !wanted[k] {
				if _, ok := have[k]; ok {
					if err := p.ipvs.DeleteService(k); err != nil && !errors.Is(err, unix.ESRCH) {
						return res, err
					}
					delete(have, k)
					res.Written++
				}
				delete(p.draining, k)
			}
		}
		delete(p.programmed, n)
		for _, e := range want[n] {
			if len(e.dests) == 0 {
				continue
			}
			cur, exists := have[e.svc.Key()]
			w, err := p.syncService(e, cur, exists)
			res.Written += w
			if err != nil {
				return res, err
			}
		}
		if es, ok := want[n]; ok {
			p.programmed[n] = es
		}
	}
	if changed.Full {
		w, err := p.removeLeftovers(have, wanted, bound)
		res.Written += w
		if err != nil {
			return res, err
		}
	}
	w, err := p.reapDrained()
	res.Written += w
	if err != nil {
		return res, err
	}
	// Total: virtual and real servers owned now.
	for _, e := range all {
		if len(e.dests) > 0 {
			res.Total += 1 + len(e.dests)
		}
	}
	return res, nil
}

// syncService brings one virtual server and its real servers to e.
// cur is the kernel's virtual server (exists false: none); writes are
// made only where they differ, so a full sync over an unchanged table
// writes nothing.
func (p *Proxier) syncService(e entry, cur Service, exists bool) (int, error) {
	k := e.svc.Key()
	written := 0
	switch {
	case !exists:
		if err := p.ipvs.AddService(e.svc); err != nil {
			return written, err
		}
		written++
	case cur.Scheduler != e.svc.Scheduler || cur.Flags != e.svc.Flags || cur.Timeout != e.svc.Timeout:
		if err := p.ipvs.UpdateService(e.svc); err != nil {
			return written, err
		}
		written++
	}
	have, err := p.ipvs.Destinations(k)
	if err != nil {
		return written, err
	}
	wantDest := map[netip.AddrPort]Destination{}
	for _, d := range e.dests {
		wantDest[d.Key()] = d
	}
	for _, d := range have {
		w, ok := wantDest[d.Key()]
		switch {
		case ok && d.Weight != w.Weight:
			if err := p.ipvs.UpdateDestination(k, w); err != nil {
				return written, err
			}
			written++
			delete(p.draining[k], d.Key())
		case ok:
			delete(p.draining[k], d.Key())
		case e.svc.Protocol == proxy.UDP:
			// UDP has no connections to finish: deleted at once, like
			// kube-proxy, and the next datagram of a flow to it is
			// rescheduled (expire_nodest_conn).
			if err := p.ipvs.DeleteDestination(k, d.Key()); err != nil && !errors.Is(err, unix.ENOENT) {
				return written, err
			}
			written++
			delete(p.draining[k], d.Key())
		case d.Weight != 0:
			// Graceful termination: no new connections, existing ones
			// finish (kubernetes#57841, #81775); reapDrained removes it.
			d.Weight = 0
			if err := p.ipvs.UpdateDestination(k, d); err != nil {
				return written, err
			}
			written++
			p.drain(k, d.Key())
		default:
			p.drain(k, d.Key())
		}
		delete(wantDest, d.Key())
	}
	for _, d := range e.dests {
		if _, ok := wantDest[d.Key()]; !ok {
			continue
		}
		if err := p.ipvs.AddDestination(k, d); err != nil {
			return written, err
		}
		written++
	}
	return written, nil
}

func (p *Proxier) drain(k ServiceKey, ap netip.AddrPort) {
	if p.draining[k] == nil {
		p.draining[k] = map[netip.AddrPort]time.Time{}
	}
	if _, ok := p.draining[k][ap]; !ok {
		p.draining[k][ap] = p.cfg.Now().Add(p.cfg.GracefulTimeout)
	}
}

// reapDrained removes draining real servers whose connections have ended
// or whose deadline passed.
func (p *Proxier) reapDrained() (int, error) {
	written := 0
	now := p.cfg.Now()
	for k, aps := range p.draining {
		dests, err := p.ipvs.Destinations(k)
		if err != nil {
			return written, err
		}
		for _, d := range dests {
			deadline, ok := aps[d.Key()]
			if !ok || d.Weight != 0 {
				continue
			}
			if d.ActiveConns+d.InactiveConns == 0 || !now.Before(deadline) {
				if err := p.ipvs.DeleteDestination(k, d.Key()); err != nil && !errors.Is(err, unix.ENOENT) {
					return written, err
				}
				written++
				delete(aps, d.Key())
			}
		}
		for ap := range aps {
			if !slices.ContainsFunc(dests, func(d Destination) bool { return d.Key() == ap }) {
				delete(aps, ap)
			}
		}
		if len(aps) == 0 {
			delete(p.draining, k)
		}
	}
	return written, nil
}

// recordNodePorts is the nodeports record this sync writes: the NodePort
// virtual servers it wants, and those recorded before that the kernel
// still has (a failed or partial sync, or a restart, has not deleted them
// yet; the next full sync does). It becomes p.nodePorts.
func (p *Proxier) recordNodePorts(ctx context.Context, all []entry, have map[ServiceKey]Service) ([]ServiceKey, error) {
	if !p.nodePortsRead {
		prev, err := p.host.RecordedNodePorts(ctx, p.family)
		if err != nil {
			return nil, fmt.Errorf("read the record of nodenet's NodePort virtual servers: %w", err)
		}
		p.nodePorts = map[ServiceKey]bool{}
		for _, k := range prev {
			p.nodePorts[k] = true
		}
		p.nodePortsRead = true
	}
	next := map[ServiceKey]bool{}
	for k := range p.nodePorts {
		if _, ok := have[k]; ok {
			next[k] = true
		}
	}
	for _, e := range all {
		if !e.bind && len(e.dests) > 0 {
			next[e.svc.Key()] = true
		}
	}
	p.nodePorts = next
	out := make([]ServiceKey, 0, len(next))
	for k := range next {
		out = append(out, k)
	}
	return out, nil
}

// owns reports whether virtual server k is nodenet's: on an address of
// the VIP device (vips), or a NodePort it recorded.
func owns(k ServiceKey, vips map[netip.Addr]bool, nodePorts map[ServiceKey]bool) bool {
	return vips[k.Addr] || nodePorts[k]
}

func addrSet(addrs []netip.Addr) map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		out[a] = true
	}
	return out
}

// removeLeftovers deletes virtual servers of this family that are
// nodenet's (owns) but not wanted: services deleted while the proxy was
// down. Another IPVS user's, even on the node's addresses, stay.
func (p *Proxier) removeLeftovers(have map[ServiceKey]Service, wanted map[ServiceKey]bool, bound []netip.Addr) (int, error) {
	vips := addrSet(bound)
	written := 0
	for _, s := range have {
		if !p.family.Contains(s.Addr) || wanted[s.Key()] || !owns(s.Key(), vips, p.nodePorts) {
			continue
		}
		if err := p.ipvs.DeleteService(s.Key()); err != nil && !errors.Is(err, unix.ESRCH) {
			return written, err
		}
		delete(p.draining, s.Key())
		written++
	}
	return written, nil
}

// syncTable brings the nft table to t: the whole table on a full sync or
// when the last write is unknown or its chains differ, else only the
// elements that changed (none: no nft run at all).
func (p *Proxier) syncTable(ctx context.Context, t *table, full bool) error {
	script, ok := "", false
	if !full {
		script, ok = t.delta(p.table)
	}
	if !ok {
		script = t.script()
	}
	if script == "" {
		return nil
	}
	p.table = nil
	if err := p.host.ApplyNft(ctx, script); err != nil {
		return fmt.Errorf("ipvs mode nft table: %w", err)
	}
	p.table = t
	return nil
}

// boundVIPs are the device's addresses: listed from the kernel on a full
// sync or when unknown, else those the last sync left.
func (p *Proxier) boundVIPs(full bool) ([]netip.Addr, error) {
	if full || p.vips == nil {
		return p.host.VIPs(p.family)
	}
	out := make([]netip.Addr, 0, len(p.vips))
	for a := range p.vips {
		out = append(out, a)
	}
	return out, nil
}

// syncVIPs makes the device, which holds have, hold exactly want (of
// this family), and remembers that for the next partial sync.
func (p *Proxier) syncVIPs(have []netip.Addr, want map[netip.Addr]bool) error {
	p.vips = nil
	add := maps.Clone(want)
	for _, a := range have {
		if want[a] {
			delete(add, a)
			continue
		}
		if err := p.host.DelVIP(a); err != nil {
			return err
		}
	}
	sorted := slices.SortedFunc(maps.Keys(add), netip.Addr.Compare)
	for _, a := range sorted {
		if err := p.host.AddVIP(a); err != nil {
			return err
		}
	}
	p.vips = want
	return nil
}

// Intact implements proxy.IntegrityChecker: the nft table and the VIP
// device must still be there. The core polls it, which also gives
// draining real servers whose connections ended their removal between
// syncs.
func (p *Proxier) Intact(ctx context.Context) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.reapDrained(); err != nil {
		return false, err
	}
	ok, err := p.host.NftTableExists(ctx, nftFamily(p.family), TableName)
	if err != nil || !ok {
		return false, err
	}
	return p.host.DeviceExists()
}

// Cleanup implements proxy.DataPlane: removes nodenet's virtual servers
// (those on a VIP of the device, and the NodePorts its table records),
// the nft table, and the device with its VIPs, whichever process made
// them. Unlike kube-proxy's cleanup, which flushes all of IPVS, another
// IPVS user's virtual servers stay, on the node's addresses too.
func (p *Proxier) Cleanup(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	vips, err := p.host.VIPs(p.family)
	errs = append(errs, err)
	if p.ipvs != nil {
		// The record is read before the table goes: it is in the table.
		recorded, err := p.host.RecordedNodePorts(ctx, p.family)
		errs = append(errs, err)
		nodePorts := map[ServiceKey]bool{}
		for _, k := range recorded {
			nodePorts[k] = true
		}
		all, err := p.ipvs.Services()
		errs = append(errs, err)
		bound := addrSet(vips)
		for _, s := range all {
			if p.family.Contains(s.Addr) && owns(s.Key(), bound, nodePorts) {
				if err := p.ipvs.DeleteService(s.Key()); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := p.host.ApplyNft(ctx, cleanupScript(p.family)); err != nil {
		errs = append(errs, err)
	}
	for _, a := range vips {
		errs = append(errs, p.host.DelVIP(a))
	}
	if other, err := p.host.VIPs(otherFamily(p.family)); err == nil && len(other) == 0 {
		errs = append(errs, p.host.RemoveDevice())
	}
	p.programmed = map[proxy.ServicePortName][]entry{}
	p.draining = map[ServiceKey]map[netip.AddrPort]time.Time{}
	p.nodePorts, p.nodePortsRead = nil, false
	p.table, p.vips = nil, nil
	return errors.Join(errs...)
}

// CleanupNetns is the mode's Cleanup for family f in the network namespace
// at netns ("" for the caller's), from any process: on a kernel without
// IPVS there are no virtual servers, and the rest is still removed.
func CleanupNetns(ctx context.Context, f proxy.Family, netns string, log *slog.Logger) error {
	var h Handle
	n, err := Open(netns)
	switch {
	case errors.Is(err, ErrNoIPVS):
	case err != nil:
		return err
	default:
		defer n.Close()
		h = n
	}
	return New(f, h, NetHost{Netns: netns}, Config{}, log).Cleanup(ctx)
}

// Probe reports ErrNoIPVS when the kernel of the caller's network
// namespace has no IPVS: `nodenet up` asks before starting anything.
func Probe() error {
	n, err := Open("")
	if err != nil {
		return err
	}
	return n.Close()
}

func otherFamily(f proxy.Family) proxy.Family {
	if f == proxy.IPv4 {
		return proxy.IPv6
	}
	return proxy.IPv4
}

var (
	_ proxy.DataPlane        = (*Proxier)(nil)
	_ proxy.IntegrityChecker = (*Proxier)(nil)
)
