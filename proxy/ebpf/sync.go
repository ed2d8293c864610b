package ebpf

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/proxy"
)

// vip is one programmed service entry point: its services value and the
// backends in its slots (backends[{id, i}] = slots[i]).
type vip struct {
	owner proxy.ServicePortName // zero when read back from the kernel
	val   svcValue
	slots []addrPort
}

// state turns snapshots into map updates. It remembers what it wrote so a
// partial sync is a handful of updates; a full sync reads the maps back
// first, so it converges on whatever the kernel holds (a restart, another
// process, a failed sync) and rewrites only what differs.
type state struct {
	family   proxy.Family
	services table[svcKey, svcValue]
	backends table[backendKey, addrPort]
	log      *slog.Logger
	// onSkip counts an entry point a sync could not program (a reason of
	// metrics.go); nil in unit tests that do not look.
	onSkip func(reason string)
	// doomed collects the UDP {entry point, backend} pairs this sync took
	// away, whose connected sockets the data plane then closes.
	doomed []doomedKey

	vips    map[svcKey]*vip
	owned   map[proxy.ServicePortName][]svcKey
	nextID  uint32
	nSlots  int // backends entries owned
	written int // updates and deletes of the current sync
	failed  []error
	// pending holds the entry points a full sync creates, written in two
	// batches at its end (backends, then services): a cold start or a
	// first sync is then a few syscalls instead of one per entry.
	pending  []pendingVIP
	batching bool

	ranges *rangeSet // src_ranges of the tc path (tcsync.go); nil without it
}

type pendingVIP struct {
	owner proxy.ServicePortName
	e     entry
}

func newState(f proxy.Family, services table[svcKey, svcValue], backends table[backendKey, addrPort], log *slog.Logger) *state {
	return &state{family: f, services: services, backends: backends, log: log,
		vips: map[svcKey]*vip{}, owned: map[proxy.ServicePortName][]svcKey{}, nextID: 1}
}

// sync applies snap: everything with changed.Full, else changed's ports.
func (s *state) sync(snap *proxy.Snapshot, changed proxy.ChangeSet) (proxy.SyncResult, error) {
	s.written = 0
	var err error
	if changed.Full {
		err = s.full(snap)
	} else {
		err = s.partial(snap, changed)
	}
	if err != nil {
		return proxy.SyncResult{}, err
	}
	return proxy.SyncResult{Written: s.written, Total: len(s.vips) + s.nSlots}, nil
}

func (s *state) full(snap *proxy.Snapshot) error {
	orphans, err := s.readKernel()
	if err != nil {
		return err
	}
	if err := s.ranges.load(); err != nil {
		return err
	}
	// The tc path sends cluster-CIDR sources to inside entries; the CIDRs
	// are configuration, so a full sync is enough to keep them.
	n, err := s.ranges.set(clusterCIDRsID, familyPrefixes(s.family, snap.ClusterCIDRs))
	s.written += n
	if err != nil {
		return fmt.Errorf("program cluster CIDRs: %w", err)
	}
	want := make(map[svcKey]bool, len(snap.Services))
	s.batching = true
	for _, name := range snap.SortedNames() {
		var keys []svcKey
		for _, e := range entries(snap, snap.Services[name]) {
			if want[e.key] {
				s.log.Warn("service entry point already taken, skipped", "service", name, "entry", s.keyString(e.key))
				s.skip(skipConflict)
				continue
			}
			want[e.key] = true
			if s.write(name, e) {
				keys = append(keys, e.key)
			}
		}
		s.setOwned(name, keys)
	}
	s.flush()
	for _, k := range slices.Collect(maps.Keys(s.vips)) {
		if !want[k] {
			if err := s.remove(k); err != nil {
				return err
			}
		}
	}
	for _, bk := range orphans {
		if err := s.backends.Delete(bk); err != nil {
			return err
		}
		s.written++
	}
	if err := s.dropOrphanRanges(); err != nil {
		return err
	}
	return s.lastErr()
}

func (s *state) partial(snap *proxy.Snapshot, changed proxy.ChangeSet) error {
	for _, name := range proxy.SortedPorts(changed, s.owned, snap) {
		keep := map[svcKey]bool{}
		var keys []svcKey
		if sp, ok := snap.Services[name]; ok {
			for _, e := range entries(snap, sp) {
				if v := s.vips[e.key]; v != nil && v.owner != name && v.owner != (proxy.ServicePortName{}) && snap.Services[v.owner] != nil {
					s.log.Warn("service entry point already taken, skipped", "service", name, "entry", s.keyString(e.key), "by", v.owner)
					s.skip(skipConflict)
					continue
				}
				keep[e.key] = true
				if s.write(name, e) {
					keys = append(keys, e.key)
				}
			}
		}
		for _, k := range s.owned[name] {
			if v := s.vips[k]; v != nil && v.owner == name && !keep[k] {
				if err := s.remove(k); err != nil {
					return err
				}
			}
		}
		s.setOwned(name, keys)
	}
	return s.lastErr()
}

// flush writes the pending new entry points: all their backends, then all
// their services entries. If a batch fails (a map filled up) it writes them
// one by one, so only the entry points that do not fit are skipped; the
// backends a failed batch left behind are removed by the next full sync.
func (s *state) flush() {
	pend := s.pending
	s.pending, s.batching = nil, false
	var bks []backendKey
	var bes []addrPort
	sks := make([]svcKey, len(pend))
	svs := make([]svcValue, len(pend))
	vs := make([]*vip, len(pend))
	for i, p := range pend {
		id := s.nextID
		s.nextID++
		slots := assignSlots(nil, p.e.backends)
		for slot, b := range slots {
			bks = append(bks, backendKey{Id: id, Slot: uint32(slot)})
			bes = append(bes, b)
		}
		sks[i] = p.e.key
		svs[i] = svcValue{Id: id, Count: uint32(len(slots)), Flags: p.e.flags, Affinity: p.e.affinity}
		vs[i] = &vip{owner: p.owner, val: svs[i], slots: slots}
	}
	err := putAll(s.backends, bks, bes)
	if err == nil {
		err = putAll(s.services, sks, svs)
	}
	if err != nil {
		s.log.Warn("batched map write failed, writing entry by entry", "err", err)
		for _, p := range pend {
			s.write(p.owner, p.e)
		}
		return
	}
	s.written += len(bks) + len(sks)
	for i, v := range vs {
		s.vips[sks[i]] = v
		s.nSlots += len(v.slots)
		s.setRanges(v.owner, pend[i].e, v.val.Id)
	}
}

func (s *state) setOwned(name proxy.ServicePortName, keys []svcKey) {
	if len(keys) == 0 {
		delete(s.owned, name)
		return
	}
	s.owned[name] = keys
}

// readKernel replaces what s remembers with what the maps hold and returns
// the backends entries no service entry point uses.
func (s *state) readKernel() ([]backendKey, error) {
	svcs, err := s.services.All()
	if err != nil {
		return nil, err
	}
	bes, err := s.backends.All()
	if err != nil {
		return nil, err
	}
	s.vips, s.owned, s.nextID, s.nSlots, s.failed = map[svcKey]*vip{}, map[proxy.ServicePortName][]svcKey{}, 1, 0, nil
	used := map[backendKey]bool{}
	for k, v := range svcs {
		// A slot missing from the map stays the zero backend, which no
		// endpoint equals, so the write below fills it in.
		slots := make([]addrPort, v.Count)
		for i := range slots {
			bk := backendKey{Id: v.Id, Slot: uint32(i)}
			slots[i] = bes[bk]
			used[bk] = true
		}
		s.vips[k] = &vip{val: v, slots: slots}
		s.nSlots += len(slots)
		s.nextID = max(s.nextID, v.Id+1)
	}
	var orphans []backendKey
	for bk := range bes {
		if !used[bk] {
			orphans = append(orphans, bk)
		}
	}
	return orphans, nil
}

// write makes e's entry point hold e, reusing its id and slots: new
// backends are in place before the count covers them and the count drops
// before the tail is deleted, so a concurrent connect never finds an empty
// slot below the count it read. It reports whether e is programmed; a map
// that is full skips e with a log line instead of failing the sync.
func (s *state) write(owner proxy.ServicePortName, e entry) bool {
	v := s.vips[e.key]
	isNew := v == nil
	if isNew && s.batching {
		s.pending = append(s.pending, pendingVIP{owner, e})
		return true
	}
	if isNew {
		v = &vip{val: svcValue{Id: s.nextID}}
		s.nextID++
	}
	slots := assignSlots(v.slots, e.backends)
	val := svcValue{Id: v.val.Id, Count: uint32(len(slots)), Flags: e.flags, Affinity: e.affinity}
	err := func() error {
		for i, b := range slots {
			if i >= len(v.slots) || v.slots[i] != b {
				if err := s.backends.Put(backendKey{Id: val.Id, Slot: uint32(i)}, b); err != nil {
					return err
				}
				s.written++
			}
		}
		if isNew || val != v.val {
			if err := s.services.Put(e.key, val); err != nil {
				return err
			}
			s.written++
		}
		for i := len(slots); i < len(v.slots); i++ {
			if err := s.backends.Delete(backendKey{Id: val.Id, Slot: uint32(i)}); err != nil {
				return err
			}
			s.written++
		}
		return nil
	}()
	if err != nil {
		// What the kernel holds for e is unknown now: forget it, so the
		// next full sync reads it back.
		if !isNew {
			delete(s.vips, e.key)
			s.nSlots -= len(v.slots)
		}
		if errors.Is(err, unix.E2BIG) {
			s.log.Error("BPF map full, service entry point skipped", "service", owner, "entry", s.keyString(e.key), "err", err)
			s.skip(skipMapFull)
			return false
		}
		s.failed = append(s.failed, fmt.Errorf("program %s (%s): %w", owner, s.keyString(e.key), err))
		return false
	}
	if isNew {
		s.vips[e.key] = v
	}
	s.doom(e.key, v.slots, slots)
	s.nSlots += len(slots) - len(v.slots)
	v.owner, v.val, v.slots = owner, val, slots
	s.setRanges(owner, e, val.Id)
	return true
}

// remove deletes an entry point: the services entry first, so no connect
// picks a backend that is about to go.
func (s *state) remove(k svcKey) error {
	v := s.vips[k]
	if err := s.services.Delete(k); err != nil {
		return err
	}
	s.written++
	for i := range v.slots {
		if err := s.backends.Delete(backendKey{Id: v.val.Id, Slot: uint32(i)}); err != nil {
			return err
		}
		s.written++
	}
	s.doom(k, v.slots, nil)
	delete(s.vips, k)
	s.nSlots -= len(v.slots)
	n, err := s.ranges.set(v.val.Id, nil)
	s.written += n
	return err
}

// doom records the backends of UDP entry point k in old but not in now.
func (s *state) doom(k svcKey, old, now []addrPort) {
	if k.Proto != protoNumbers[proxy.UDP] {
		return
	}
	for _, b := range old {
		if !slices.Contains(now, b) {
			s.doomed = append(s.doomed, doomedKey{Vip: sockdestroyAddrport{Addr: k.Addr, Port: k.Port}, Backend: sockdestroyAddrport(b)})
		}
	}
}

func (s *state) skip(reason string) {
	if s.onSkip != nil {
		s.onSkip(reason)
	}
}

// lastErr is every write error of this sync (map-full skips excluded).
func (s *state) lastErr() error {
	err := errors.Join(s.failed...)
	s.failed = nil
	return err
}

func (s *state) keyString(k svcKey) string {
	proto := fmt.Sprint(k.Proto)
	for p, n := range protoNumbers {
		if n == k.Proto {
			proto = p.Lower()
		}
	}
	return fmt.Sprintf("%s/%s%s", entryAddr(k, s.family), proto, scopeSuffix(k))
}

// entryAddr shows k's address and port; a wildcard NodePort's address as
// "*" (every local address).
func entryAddr(k svcKey, f proxy.Family) string {
	if k.Scope&scopeWildcard != 0 {
		return fmt.Sprintf("*:%d", swapPort(k.Port))
	}
	return netipAddrPort(k.Addr, k.Port, f).String()
}

// scopeSuffix marks an inside entry (flagInside) in logs and dumps.
func scopeSuffix(k svcKey) string {
	if k.Scope&scopeInside != 0 {
		return " (inside)"
	}
	return ""
}
