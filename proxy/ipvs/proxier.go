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
	// programmed are the entries each service port got at the last sync,
	// as counted in acct.
	programmed map[proxy.ServicePortName][]entry
	acct       *accounts
	// draining are removed real servers kept at weight 0 until their
	// connections end or their deadline passes.
	draining map[ServiceKey]map[netip.AddrPort]time.Time
	// timeoutsSet: the configured timeouts were written.
	timeoutsSet bool
	// nodePorts are the virtual servers on node addresses nodenet made,
	// kept in the table's nodeports set (read back at the first sync, so
	// a restarted proxy knows its predecessor's); nodePortsRead: it was.
	// unrecord are those deleted since: the next table write drops them
	// from the record unless they are wanted again.
	nodePorts     map[ServiceKey]bool
	nodePortsRead bool
	unrecord      map[ServiceKey]bool
	// kernel is nodenet's virtual servers and their real servers as the
	// kernel holds them: read at every full sync (known after one that
	// succeeded) and kept up to date by each write, so a partial sync
	// reads nothing back. A failed write makes its services unsure: the
	// next sync reads them from the kernel and rewrites their ports.
	kernel map[ServiceKey]*vsState
	known  bool
	unsure map[ServiceKey]bool
	// chains are the table's chains as last written, and tableOK says
	// the table holds what acct and nodePorts describe: a partial sync
	// then writes only the elements that changed.
	chains  string
	tableOK bool
	// vips are the device's addresses after the last sync (nil: unknown,
	// so they are listed).
	vips map[netip.Addr]bool
	// nodeAddrs are the node's addresses NodePorts listened on at the
	// last sync (NodePorts.All), read again by full syncs and by partial
	// ones that change a NodePort.
	nodeAddrs   []netip.Addr
	nodeAddrsOK bool
}

// vsState is a virtual server and its real servers as the kernel holds
// them.
type vsState struct {
	svc   Service
	dests map[netip.AddrPort]Destination
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
	p := &Proxier{family: f, ipvs: h, host: host, cfg: cfg, log: log}
	p.forget()
	return p
}

// forget drops what the proxier knows of the kernel: the next sync is a
// full one that reads it all.
func (p *Proxier) forget() {
	p.programmed = map[proxy.ServicePortName][]entry{}
	p.acct = newAccounts()
	p.draining = map[ServiceKey]map[netip.AddrPort]time.Time{}
	p.nodePorts, p.nodePortsRead, p.unrecord = nil, false, map[ServiceKey]bool{}
	p.kernel, p.known, p.unsure = map[ServiceKey]*vsState{}, false, map[ServiceKey]bool{}
	p.chains, p.tableOK = "", false
	p.vips = nil
	p.nodeAddrs, p.nodeAddrsOK = nil, false
}

// Name implements proxy.DataPlane.
func (p *Proxier) Name() string { return "ipvs" }

// Sync implements proxy.DataPlane. A full sync (or the first) reads the
// kernel's virtual servers, VIPs and node addresses and rewrites the nft
// table in one transaction; a partial one reads nothing back: it counts
// the changed service ports' entries out and in (accounts) and writes
// only what that changed — nft elements in one transaction, VIPs, and
// virtual and real servers many to a netlink request. IPVS has no
// transactions; each write is idempotent or checked against the known
// state, and a failed one makes its services unsure, read again and
// rewritten by the next sync.
func (p *Proxier) Sync(ctx context.Context, snap *proxy.Snapshot, changed proxy.ChangeSet) (proxy.SyncResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var res proxy.SyncResult
	ph := newPhases()
	full := changed.Full || !p.known
	defer func() { ph.log(p.log, full) }()
	if full || p.vips == nil {
		// A device (re)made here holds none of the VIPs the last sync
		// left. A partial sync trusts it (Intact checks it between
		// syncs; a VIP write to a missing device fails the sync).
		if ok, err := p.host.DeviceExists(); err != nil || !ok {
			p.vips = nil
		}
		if err := p.host.EnsureDevice(); err != nil {
			return res, err
		}
	}
	if !p.timeoutsSet && p.cfg.Timeouts != (Timeouts{}) {
		if err := p.ipvs.SetTimeouts(p.cfg.Timeouts); err != nil {
			return res, err
		}
		p.timeoutsSet = true
	}
	ph.mark("device")
	var ports []proxy.ServicePortName
	var stale []ServiceKey
	if !full {
		ports = proxy.SortedPorts(changed, p.programmed, snap)
		var err error
		if ports, stale, err = p.readUnsure(ports); err != nil {
			return res, err
		}
		if full, err = p.nodeAddrsChanged(snap, ports); err != nil {
			return res, err
		}
	}
	ph.mark("unsure")
	var have map[ServiceKey]Service
	if full {
		if err := p.readNodeAddrs(snap); err != nil {
			return res, err
		}
		ports = allPorts(snap, p.programmed)
		var err error
		if have, err = p.readKernel(); err != nil {
			return res, err
		}
	}
	ph.mark("read")
	// Count the ports' entries out and in.
	t := newTouched()
	old := map[proxy.ServicePortName][]entry{}
	if full {
		old, p.programmed, p.acct = p.programmed, map[proxy.ServicePortName][]entry{}, newAccounts()
		t = nil
	}
	nodeAddrs := p.nodeAddrsOf(snap)
	for _, n := range ports {
		if !full {
			old[n] = p.programmed[n]
			p.acct.count(n, p.programmed[n], -1, t)
			delete(p.programmed, n)
		}
		if sp, ok := snap.Services[n]; ok {
			es := entries(sp, nodeAddrs, p.cfg.Scheduler)
			p.acct.count(n, es, 1, t)
			p.programmed[n] = es
		}
	}
	ph.mark("entries")
	// VIPs first: a virtual server on a VIP is known as nodenet's by it.
	bound, err := p.syncVIPs(t)
	if err != nil {
		return res, err
	}
	ph.mark("vips")
	// The record is written before the virtual servers it names are made,
	// so whatever this sync leaves behind is recorded.
	if err := p.syncTable(ctx, snap, have, t); err != nil {
		return res, err
	}
	ph.mark("nft")
	// Virtual and real servers.
	var ops []Op
	for _, k := range stale {
		if _, ok := p.kernel[k]; ok && p.acct.wanted[k] == 0 {
			ops = append(ops, Op{Kind: OpDeleteService, Svc: serviceOf(k)})
		}
	}
	if full {
		left, err := p.leftovers(have, bound, old)
		if err != nil {
			return res, err
		}
		ops = append(ops, left...)
	}
	for _, n := range ports {
		for _, e := range old[n] {
			k := e.svc.Key()
			if _, ok := p.kernel[k]; ok && p.acct.wanted[k] == 0 && !full {
				ops = append(ops, Op{Kind: OpDeleteService, Svc: serviceOf(k)})
			}
		}
		for _, e := range p.programmed[n] {
			if len(e.dests) > 0 {
				ops = p.serviceOps(e, ops)
			}
		}
	}
	ops = dedupDeletes(ops)
	ph.mark("diff")
	res.Written += len(ops)
	if err := p.apply(ops); err != nil {
		return res, err
	}
	ph.mark("ipvs")
	w, err := p.reapDrained()
	res.Written += w
	if err != nil {
		return res, err
	}
	ph.mark("reap")
	res.Total = p.acct.total
	return res, nil
}

// allPorts are the service ports of snap and those programmed before.
func allPorts(snap *proxy.Snapshot, programmed map[proxy.ServicePortName][]entry) []proxy.ServicePortName {
	ports := make([]proxy.ServicePortName, 0, len(snap.Services))
	for n := range snap.Services {
		ports = append(ports, n)
	}
	for n := range programmed {
		if _, ok := snap.Services[n]; !ok {
			ports = append(ports, n)
		}
	}
	slices.SortFunc(ports, proxy.ServicePortName.Compare)
	return ports
}

// dedupDeletes keeps the first deletion of each virtual server (a stale
// one can also be a changed port's).
func dedupDeletes(ops []Op) []Op {
	seen := map[ServiceKey]bool{}
	return slices.DeleteFunc(ops, func(op Op) bool {
		if op.Kind != OpDeleteService {
			return false
		}
		k := op.Svc.Key()
		if seen[k] {
			return true
		}
		seen[k] = true
		return false
	})
}

// readUnsure reads the virtual servers a failed write left unsure back
// from the kernel: the ports that want them are rewritten (added to
// ports), and those no port wants are returned as stale (deleted if
// there).
func (p *Proxier) readUnsure(ports []proxy.ServicePortName) ([]proxy.ServicePortName, []ServiceKey, error) {
	if len(p.unsure) == 0 {
		return ports, nil, nil
	}
	var stale []ServiceKey
	for _, k := range slices.SortedFunc(maps.Keys(p.unsure), compareKeys) {
		if err := p.readService(k); err != nil {
			return nil, nil, err
		}
		delete(p.unsure, k)
		if n, ok := p.acct.owner[k]; ok {
			if !slices.Contains(ports, n) {
				ports = append(ports, n)
			}
		} else {
			stale = append(stale, k)
		}
	}
	slices.SortFunc(ports, proxy.ServicePortName.Compare)
	return ports, stale, nil
}

// readService reads virtual server k and its real servers into p.kernel.
func (p *Proxier) readService(k ServiceKey) error {
	svc, ok, err := p.ipvs.Service(k)
	if err != nil {
		return err
	}
	if !ok {
		delete(p.kernel, k)
		return nil
	}
	dests, err := p.ipvs.Destinations(k)
	if err != nil {
		return err
	}
	p.kernel[k] = newVSState(svc, dests)
	return nil
}

func newVSState(svc Service, dests []Destination) *vsState {
	st := &vsState{svc: svc, dests: make(map[netip.AddrPort]Destination, len(dests))}
	for _, d := range dests {
		d.ActiveConns, d.InactiveConns = 0, 0
		st.dests[d.Key()] = d
	}
	return st
}

// readKernel is a full sync's reading of IPVS: every virtual server (the
// listing), and the real servers of those nodenet has or wants, into
// p.kernel. The list is returned (NodePorts still in the kernel stay
// recorded; leftovers are found in it).
func (p *Proxier) readKernel() (map[ServiceKey]Service, error) {
	p.known = false
	current, err := p.ipvs.Services()
	if err != nil {
		return nil, err
	}
	have := make(map[ServiceKey]Service, len(current))
	for _, s := range current {
		have[s.Key()] = s
	}
	p.kernel, p.unsure = map[ServiceKey]*vsState{}, map[ServiceKey]bool{}
	return have, nil
}

// nodeAddrsOf is where NodePorts listen.
func (p *Proxier) nodeAddrsOf(snap *proxy.Snapshot) []netip.Addr {
	if !snap.NodePorts.All {
		return snap.NodePorts.Addrs
	}
	return p.nodeAddrs
}

// readNodeAddrs reads the node's addresses when NodePorts listen on all
// of them.
func (p *Proxier) readNodeAddrs(snap *proxy.Snapshot) error {
	if !snap.NodePorts.All {
		return nil
	}
	addrs, err := p.host.NodeAddrs(p.family)
	if err != nil {
		p.nodeAddrsOK = false
		return err
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	p.nodeAddrs, p.nodeAddrsOK = addrs, true
	return nil
}

// nodeAddrsChanged reads the node's addresses again for a partial sync
// that writes a NodePort (the core does not tell when they change under
// NodePorts.All): changed, the sync must be a full one.
func (p *Proxier) nodeAddrsChanged(snap *proxy.Snapshot, ports []proxy.ServicePortName) (bool, error) {
	if !snap.NodePorts.All {
		return false, nil
	}
	if !p.nodeAddrsOK {
		return true, nil
	}
	nodePort := func(n proxy.ServicePortName) bool {
		if sp, ok := snap.Services[n]; ok && sp.NodePort != 0 {
			return true
		}
		return slices.ContainsFunc(p.programmed[n], func(e entry) bool { return !e.bind })
	}
	if !slices.ContainsFunc(ports, nodePort) {
		return false, nil
	}
	before := p.nodeAddrs
	if err := p.readNodeAddrs(snap); err != nil {
		return false, err
	}
	return !slices.Equal(before, p.nodeAddrs), nil
}

// syncVIPs brings the device's addresses to those the accounts want: on
// a full sync (t nil) or when unknown, listed and compared; else only
// the touched ones. It returns the addresses the device held before (a
// virtual server on one of them is nodenet's), listed ones only.
func (p *Proxier) syncVIPs(t *touched) ([]netip.Addr, error) {
	var bound, add, del []netip.Addr
	if t == nil || p.vips == nil {
		var err error
		if bound, err = p.host.VIPs(p.family); err != nil {
			return nil, err
		}
		have := addrSet(bound)
		for _, a := range bound {
			if p.acct.vips[a] == 0 {
				del = append(del, a)
			}
		}
		for a := range p.acct.vips {
			if !have[a] {
				add = append(add, a)
			}
		}
		p.vips = have
	} else {
		for a := range t.vips {
			switch want := p.acct.vips[a] > 0; {
			case want && !p.vips[a]:
				add = append(add, a)
			case !want && p.vips[a]:
				del = append(del, a)
			}
		}
	}
	slices.SortFunc(add, netip.Addr.Compare)
	slices.SortFunc(del, netip.Addr.Compare)
	if len(add)+len(del) == 0 {
		return bound, nil
	}
	vips := p.vips
	p.vips = nil
	if len(del) > 0 {
		if err := p.host.DelVIPs(del); err != nil {
			return nil, err
		}
	}
	if len(add) > 0 {
		if err := p.host.AddVIPs(add); err != nil {
			return nil, err
		}
	}
	for _, a := range del {
		delete(vips, a)
	}
	for _, a := range add {
		vips[a] = true
	}
	p.vips = vips
	return bound, nil
}

// syncTable brings the nft table to the accounts: the whole table on a
// full sync (t nil), or when its last write failed or its chains differ;
// else only the elements that changed (none: no nft run at all). have,
// on a full sync, is the kernel's virtual servers: recorded NodePorts it
// still has stay recorded.
func (p *Proxier) syncTable(ctx context.Context, snap *proxy.Snapshot, have map[ServiceKey]Service, t *touched) error {
	if err := p.readRecord(ctx); err != nil {
		return err
	}
	var ops []elemOp
	if t == nil {
		next := map[ServiceKey]bool{}
		for k := range p.nodePorts {
			if _, ok := have[k]; ok {
				next[k] = true
			}
		}
		p.nodePorts = next
	}
	for k := range p.acct.nodePorts {
		if !p.nodePorts[k] {
			p.nodePorts[k] = true
			ops = append(ops, elemOp{set: setNodePorts, elem: vipKey(k)})
		}
	}
	for k := range p.unrecord {
		if p.acct.nodePorts[k] == 0 && p.nodePorts[k] {
			delete(p.nodePorts, k)
			ops = append(ops, elemOp{del: true, set: setNodePorts, elem: vipKey(k)})
		}
	}
	chains := chains(p.family, snap)
	var script string
	if t == nil || !p.tableOK || chains != p.chains {
		script = tableOf(p.family, chains, p.acct, p.nodePorts).script()
	} else {
		script = elementScript(p.family, append(ops, p.acct.flips(t)...))
	}
	if script == "" {
		p.unrecord = map[ServiceKey]bool{}
		return nil
	}
	p.tableOK = false
	if err := p.host.ApplyNft(ctx, script); err != nil {
		return fmt.Errorf("ipvs mode nft table: %w", err)
	}
	p.chains, p.tableOK = chains, true
	p.unrecord = map[ServiceKey]bool{}
	return nil
}

// readRecord reads the nodeports record once (a restarted proxy learns
// its predecessor's NodePort virtual servers).
func (p *Proxier) readRecord(ctx context.Context) error {
	if p.nodePortsRead {
		return nil
	}
	prev, err := p.host.RecordedNodePorts(ctx, p.family)
	if err != nil {
		return fmt.Errorf("read the record of nodenet's NodePort virtual servers: %w", err)
	}
	p.nodePorts = map[ServiceKey]bool{}
	for _, k := range prev {
		p.nodePorts[k] = true
	}
	p.nodePortsRead = true
	return nil
}

// leftovers is a full sync's reading of the kernel's virtual servers
// (have, listed by readKernel): those nodenet wants go into p.kernel with
// their real servers, and it returns the deletion of those of this family
// that are nodenet's (owns: on a VIP the device held, or recorded) or were
// programmed (old) but are not wanted — services deleted while the proxy
// was down among them. Another IPVS user's, even on the node's addresses,
// stay.
func (p *Proxier) leftovers(have map[ServiceKey]Service, bound []netip.Addr, old map[proxy.ServicePortName][]entry) ([]Op, error) {
	vips := addrSet(bound)
	programmed := map[ServiceKey]bool{}
	for _, es := range old {
		for _, e := range es {
			programmed[e.svc.Key()] = true
		}
	}
	var ops []Op
	for _, k := range slices.SortedFunc(maps.Keys(have), compareKeys) {
		s := have[k]
		switch {
		case !p.family.Contains(s.Addr):
		case p.acct.wanted[k] > 0:
			dests, err := p.ipvs.Destinations(k)
			if err != nil {
				return nil, err
			}
			p.kernel[k] = newVSState(s, dests)
		case owns(k, vips, p.nodePorts) || programmed[k]:
			p.kernel[k] = &vsState{svc: s}
			ops = append(ops, Op{Kind: OpDeleteService, Svc: serviceOf(k)})
		}
	}
	p.known = true
	return ops, nil
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

// serviceOps appends the writes that bring virtual server e.svc and its
// real servers from p.kernel's state to e: none when they match.
func (p *Proxier) serviceOps(e entry, ops []Op) []Op {
	k := e.svc.Key()
	cur := p.kernel[k]
	switch {
	case cur == nil:
		ops = append(ops, Op{Kind: OpAddService, Svc: e.svc})
		cur = &vsState{svc: e.svc}
	case cur.svc.Scheduler != e.svc.Scheduler || cur.svc.Flags != e.svc.Flags || cur.svc.Timeout != e.svc.Timeout:
		ops = append(ops, Op{Kind: OpUpdateService, Svc: e.svc})
	}
	wantDest := make(map[netip.AddrPort]Destination, len(e.dests))
	for _, d := range e.dests {
		wantDest[d.Key()] = d
	}
	for _, ap := range slices.SortedFunc(maps.Keys(cur.dests), netip.AddrPort.Compare) {
		d := cur.dests[ap]
		w, ok := wantDest[ap]
		switch {
		case ok && d.Weight != w.Weight:
			ops = append(ops, Op{Kind: OpUpdateDestination, Svc: e.svc, Dest: w})
			delete(p.draining[k], ap)
		case ok:
			delete(p.draining[k], ap)
		case e.svc.Protocol == proxy.UDP:
			// UDP has no connections to finish: deleted at once, like
			// kube-proxy, and the next datagram of a flow to it is
			// rescheduled (expire_nodest_conn).
			ops = append(ops, Op{Kind: OpDeleteDestination, Svc: e.svc, Dest: d})
			delete(p.draining[k], ap)
		case d.Weight != 0:
			// Graceful termination: no new connections, existing ones
			// finish (kubernetes#57841, #81775); reapDrained removes it.
			d.Weight = 0
			ops = append(ops, Op{Kind: OpUpdateDestination, Svc: e.svc, Dest: d})
			p.drain(k, ap)
		default:
			p.drain(k, ap)
		}
		delete(wantDest, ap)
	}
	for _, d := range e.dests {
		if _, ok := wantDest[d.Key()]; ok {
			ops = append(ops, Op{Kind: OpAddDestination, Svc: e.svc, Dest: d})
		}
	}
	return ops
}

// apply writes ops and brings p.kernel along. When a write fails, the
// services of every write of the sync are unsure (the kernel went on
// with the rest of a request; which of them took is not known): the next
// sync reads them back.
func (p *Proxier) apply(ops []Op) error {
	if len(ops) == 0 {
		return nil
	}
	err := p.ipvs.Apply(ops)
	for _, op := range ops {
		k := op.Svc.Key()
		if err != nil {
			delete(p.kernel, k)
			p.unsure[k] = true
			continue
		}
		cur := p.kernel[k]
		if cur == nil && op.Kind != OpAddService && op.Kind != OpDeleteService {
			continue // a real server of a service not known here
		}
		switch op.Kind {
		case OpAddService:
			p.kernel[k] = &vsState{svc: op.Svc, dests: map[netip.AddrPort]Destination{}}
		case OpUpdateService:
			cur.svc = op.Svc
		case OpDeleteService:
			delete(p.kernel, k)
			delete(p.draining, k)
			p.unrecord[k] = true
		case OpAddDestination, OpUpdateDestination:
			cur.dests[op.Dest.Key()] = op.Dest
		case OpDeleteDestination:
			delete(cur.dests, op.Dest.Key())
		}
	}
	return err
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
// or whose deadline passed (their counts read from the kernel).
func (p *Proxier) reapDrained() (int, error) {
	now := p.cfg.Now()
	var ops []Op
	for _, k := range slices.SortedFunc(maps.Keys(p.draining), compareKeys) {
		aps := p.draining[k]
		dests, err := p.ipvs.Destinations(k)
		if err != nil {
			return 0, err
		}
		for _, d := range dests {
			deadline, ok := aps[d.Key()]
			if !ok || d.Weight != 0 {
				continue
			}
			if d.ActiveConns+d.InactiveConns == 0 || !now.Before(deadline) {
				ops = append(ops, Op{Kind: OpDeleteDestination, Svc: serviceOf(k), Dest: d})
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
	return len(ops), p.apply(ops)
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
	errs = append(errs, p.host.DelVIPs(vips))
	if other, err := p.host.VIPs(otherFamily(p.family)); err == nil && len(other) == 0 {
		errs = append(errs, p.host.RemoveDevice())
	}
	p.forget()
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
