package loadbalancer

import (
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// allocator is the table of handed-out addresses. It is the only guard
// against giving one address to two Services, so every decision that reads
// and then changes it happens under one lock.
type allocator struct {
	mu    sync.Mutex
	pools []netip.Prefix
	owner map[netip.Addr]string                     // address -> Service key
	held  map[string]map[corev1.IPFamily]netip.Addr // Service key -> its addresses
}

func newAllocator(pools []netip.Prefix) *allocator {
	return &allocator{
		pools: pools,
		owner: map[netip.Addr]string{},
		held:  map[string]map[corev1.IPFamily]netip.Addr{},
	}
}

func familyOf(a netip.Addr) corev1.IPFamily {
	if a.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// hasPool reports whether some pool serves the family.
func (a *allocator) hasPool(f corev1.IPFamily) bool {
	for _, p := range a.pools {
		if familyOf(p.Addr()) == f {
			return true
		}
	}
	return false
}

// usable reports whether addr may be handed out: inside a pool and not a
// subnet's network or broadcast address, which hosts on that subnet would
// treat specially.
func (a *allocator) usable(addr netip.Addr) bool {
	for _, p := range a.pools {
		if p.Contains(addr) {
			return usableIn(p, addr)
		}
	}
	return false
}

func usableIn(p netip.Prefix, addr netip.Addr) bool {
	if addr.Is4() {
		// /31 and /32 have no network or broadcast address (RFC 3021).
		return p.Bits() > 30 || (addr != p.Addr() && addr != lastAddr(p))
	}
	// The all-zeros address of an IPv6 subnet is the Subnet-Router anycast
	// address (RFC 4291 2.6.1); routers on the link answer it.
	return p.Bits() > 126 || addr != p.Addr()
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		if hostBits := len(b)*8 - p.Bits() - (len(b)-1-i)*8; hostBits >= 8 {
			b[i] = 0xff
		} else if hostBits > 0 {
			b[i] |= byte(1<<hostBits) - 1
		}
	}
	last, _ := netip.AddrFromSlice(b)
	return last
}

// holder returns the key of the Service holding addr.
func (a *allocator) holder(addr netip.Addr) (string, bool) {
	k, ok := a.owner[addr]
	return k, ok
}

// heldBy returns the address key holds in family f.
func (a *allocator) heldBy(key string, f corev1.IPFamily) (netip.Addr, bool) {
	addr, ok := a.held[key][f]
	return addr, ok
}

// assign gives addr to key, replacing what key held in that family. The
// caller has checked that addr is usable and not held by anyone else.
func (a *allocator) assign(key string, addr netip.Addr) {
	f := familyOf(addr)
	if old, ok := a.held[key][f]; ok {
		delete(a.owner, old)
	}
	if a.held[key] == nil {
		a.held[key] = map[corev1.IPFamily]netip.Addr{}
	}
	a.held[key][f] = addr
	a.owner[addr] = key
}

// release frees what key holds in family f; it reports whether it held
// anything.
func (a *allocator) release(key string, f corev1.IPFamily) bool {
	addr, ok := a.held[key][f]
	if !ok {
		return false
	}
	delete(a.owner, addr)
	delete(a.held[key], f)
	if len(a.held[key]) == 0 {
		delete(a.held, key)
	}
	return true
}

// releaseAll frees everything key holds; it reports whether it held
// anything.
func (a *allocator) releaseAll(key string) bool {
	freed := false
	for f := range a.held[key] {
		freed = a.release(key, f) || freed
	}
	return freed
}

// next returns the lowest free usable address of family f. The scan stops
// at the first free address, so it takes at most (addresses in use + 2)
// steps per pool however large the pool is.
func (a *allocator) next(f corev1.IPFamily) (netip.Addr, bool) {
	for _, p := range a.pools {
		if familyOf(p.Addr()) != f {
			continue
		}
		for addr := p.Addr(); addr.IsValid() && p.Contains(addr); addr = addr.Next() {
			if _, taken := a.owner[addr]; !taken && usableIn(p, addr) {
				return addr, true
			}
		}
	}
	return netip.Addr{}, false
}
