package hostlocal

import (
	"errors"
	"fmt"
	"net/netip"
)

// Errors Allocate wraps, for callers that map them to CNI error codes.
var (
	// ErrExhausted: every address of a range set is taken.
	ErrExhausted = errors.New("no free address")
	// ErrInUse: a requested address belongs to another attachment.
	ErrInUse = errors.New("address in use")
	// ErrNotInRange: a requested address is in no range set, two requested
	// addresses fall in the same set, or one is a gateway.
	ErrNotInRange = errors.New("requested address not allocatable")
)

// Request asks for one address from every range set. IPs are specific
// addresses the runtime asked for; each must fall into a different set,
// and the sets without one get the next free address round-robin.
type Request struct {
	ContainerID string
	IfName      string
	// RangeSets must be canonical (RangeSet.Canonical).
	RangeSets []RangeSet
	IPs       []netip.Addr
}

// Allocation is the address handed out from one range set; Allocate
// returns one per set, in the order of Request.RangeSets.
type Allocation struct {
	// Address carries the subnet's prefix length (10.244.1.5/24).
	Address netip.Prefix
	Gateway netip.Addr
}

// Allocate reserves one address per range set for the attachment. An
// attachment that already holds an address in a set (an ADD retried after
// a crash, or after host-local allocated it) gets that address back. On
// error nothing new stays reserved.
func (s *Store) Allocate(req Request) ([]Allocation, error) {
	var out []Allocation
	err := s.locked(func() (err error) {
		out, err = s.allocate(req)
		return err
	})
	return out, err
}

func (s *Store) allocate(req Request) (_ []Allocation, err error) {
	all, err := s.scan()
	if err != nil {
		return nil, err
	}
	taken := make(map[netip.Addr]Reservation, len(all))
	for _, r := range all {
		taken[r.IP] = r
	}
	var created []netip.Addr
	defer func() {
		if err != nil {
			for _, ip := range created {
				s.release(ip)
			}
		}
	}()

	out := make([]Allocation, len(req.RangeSets))
	done := make([]bool, len(req.RangeSets))
	assign := func(set, idx int, ip netip.Addr) {
		r := req.RangeSets[set][idx]
		out[set] = Allocation{Address: netip.PrefixFrom(ip, r.Subnet.Bits()), Gateway: r.Gateway}
		done[set] = true
	}

	for _, ip := range req.IPs {
		ip = ip.Unmap()
		set, idx, ok := findRange(req.RangeSets, ip)
		switch {
		case !ok:
			return nil, fmt.Errorf("requested %s is in none of the ranges %v: %w", ip, req.RangeSets, ErrNotInRange)
		case done[set]:
			return nil, fmt.Errorf("requested %s and %s are in the same range set: %w", out[set].Address.Addr(), ip, ErrNotInRange)
		case ip == req.RangeSets[set][idx].Gateway:
			return nil, fmt.Errorf("requested %s is the gateway: %w", ip, ErrNotInRange)
		}
		if r, ok := taken[ip]; ok {
			if !r.Owns(req.ContainerID, req.IfName) {
				return nil, fmt.Errorf("requested %s is reserved by container %s interface %s: %w", ip, r.ContainerID, r.IfName, ErrInUse)
			}
		} else {
			ok, err := s.reserve(ip, req.ContainerID, req.IfName)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, fmt.Errorf("requested %s: %w", ip, ErrInUse)
			}
			created = append(created, ip)
			if err := s.setLastReserved(set, ip); err != nil {
				return nil, err
			}
		}
		assign(set, idx, ip)
	}

	// Reuse what the attachment already holds.
	for _, r := range all {
		if !r.Owns(req.ContainerID, req.IfName) {
			continue
		}
		if set, idx, ok := findRange(req.RangeSets, r.IP); ok && !done[set] {
			assign(set, idx, r.IP)
		}
	}

	for set := range req.RangeSets {
		if done[set] {
			continue
		}
		ip, idx, err := s.next(req, set, taken)
		if err != nil {
			return nil, err
		}
		created = append(created, ip)
		if err := s.setLastReserved(set, ip); err != nil {
			return nil, err
		}
		assign(set, idx, ip)
	}
	return out, nil
}

func findRange(sets []RangeSet, ip netip.Addr) (set, idx int, ok bool) {
	for i, s := range sets {
		if j, ok := s.Contains(ip); ok {
			return i, j, true
		}
	}
	return 0, 0, false
}

// next reserves the first free address after the set's last reserved one,
// walking the ranges in order and wrapping around, exactly the order
// host-local uses, so both hand out addresses round-robin from one cursor.
func (s *Store) next(req Request, set int, taken map[netip.Addr]Reservation) (netip.Addr, int, error) {
	rs := req.RangeSets[set]
	idx := 0
	var cur, start netip.Addr
	if last := s.lastReserved(set); last.IsValid() {
		if i, ok := rs.Contains(last); ok {
			idx, cur = i, last
		}
	}
	for {
		var cand netip.Addr
		switch {
		case !cur.IsValid():
			cand = rs[idx].RangeStart
		case cur == rs[idx].RangeEnd:
			idx = (idx + 1) % len(rs)
			cand = rs[idx].RangeStart
		default:
			cand = cur.Next()
		}
		if !start.IsValid() {
			start = cand
		} else if cand == start {
			return netip.Addr{}, 0, fmt.Errorf("range set %v: %w", rs, ErrExhausted)
		}
		cur = cand
		if cand == rs[idx].Gateway {
			continue
		}
		if _, ok := taken[cand]; ok {
			continue
		}
		ok, err := s.reserve(cand, req.ContainerID, req.IfName)
		if err != nil {
			return netip.Addr{}, 0, err
		}
		if ok {
			return cand, idx, nil
		}
		taken[cand] = Reservation{IP: cand}
	}
}
