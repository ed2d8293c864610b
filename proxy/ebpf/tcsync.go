package ebpf

import (
	"fmt"
	"net/netip"
)

// rangeSet keeps the src_ranges map (loadBalancerSourceRanges, tc path):
// the allowed source prefixes of each entry point, keyed by the entry
// point's id. A nil *rangeSet (no tc interfaces) does nothing.
type rangeSet struct {
	t    table[tcnatSrcKey, uint8]
	byID map[uint32]map[tcnatSrcKey]bool
}

func newRangeSet(t table[tcnatSrcKey, uint8]) *rangeSet {
	return &rangeSet{t: t, byID: map[uint32]map[tcnatSrcKey]bool{}}
}

// load replaces what r remembers with the map's entries.
func (r *rangeSet) load() error {
	if r == nil {
		return nil
	}
	all, err := r.t.All()
	if err != nil {
		return err
	}
	r.byID = map[uint32]map[tcnatSrcKey]bool{}
	for k := range all {
		r.add(k)
	}
	return nil
}

func (r *rangeSet) add(k tcnatSrcKey) {
	if r.byID[k.Id] == nil {
		r.byID[k.Id] = map[tcnatSrcKey]bool{}
	}
	r.byID[k.Id][k] = true
}

// set makes id's allowed sources exactly prefixes; it returns the number
// of map writes.
func (r *rangeSet) set(id uint32, prefixes []netip.Prefix) (int, error) {
	if r == nil {
		return 0, nil
	}
	want := map[tcnatSrcKey]bool{}
	n := 0
	for _, p := range prefixes {
		k := srcKey(id, p)
		want[k] = true
		if r.byID[id][k] {
			continue
		}
		if err := r.t.Put(k, 1); err != nil {
			return n, fmt.Errorf("allow source %s: %w", p, err)
		}
		r.add(k)
		n++
	}
	for k := range r.byID[id] {
		if want[k] {
			continue
		}
		if err := r.t.Delete(k); err != nil {
			return n, err
		}
		delete(r.byID[id], k)
		n++
	}
	if len(r.byID[id]) == 0 {
		delete(r.byID, id)
	}
	return n, nil
}

// keepOnly drops the prefixes of every id not in ids (entry points that
// are gone, found by a full sync).
func (r *rangeSet) keepOnly(ids map[uint32]bool) (int, error) {
	if r == nil {
		return 0, nil
	}
	n := 0
	for id := range r.byID {
		if ids[id] {
			continue
		}
		w, err := r.set(id, nil)
		n += w
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// setRanges programs e's allowed sources for entry point id; a failure is
// reported with the sync's other write errors.
func (s *state) setRanges(owner fmt.Stringer, e entry, id uint32) {
	n, err := s.ranges.set(id, e.ranges)
	s.written += n
	if err != nil {
		s.failed = append(s.failed, fmt.Errorf("program source ranges of %s (%s): %w", owner, s.keyString(e.key), err))
	}
}

// dropOrphanRanges removes the sources of ids no entry point has.
func (s *state) dropOrphanRanges() error {
	if s.ranges == nil {
		return nil
	}
	ids := make(map[uint32]bool, len(s.vips)+1)
	ids[clusterCIDRsID] = true
	for _, v := range s.vips {
		ids[v.val.Id] = true
	}
	n, err := s.ranges.keepOnly(ids)
	s.written += n
	return err
}
