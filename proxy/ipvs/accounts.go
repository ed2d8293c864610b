package ipvs

import (
	"net/netip"
	"strconv"

	"github.com/nodenet/nodenet/proxy"
)

// accounts count what the programmed entries of every service port want
// of the shared kernel state: nft set and map elements, VIPs and virtual
// servers. An element, a VIP or a virtual server is wanted while its count
// is above 0; several entries can want the same one (an endpoint's hairpin
// element, a VIP with several ports). A partial sync takes the changed
// ports' old entries out and puts their new ones in, and writes only what
// crossed 0 either way: its cost is that of the change, not of every
// service.
type accounts struct {
	// elems: set or map name → element (as nft writes it) → count.
	elems map[string]map[string]int
	vips  map[netip.Addr]int
	// wanted counts the virtual servers entries want (those with
	// destinations); nodePorts those of them on node addresses; owner is
	// the service port that wants each (the last to count it).
	wanted    map[ServiceKey]int
	nodePorts map[ServiceKey]int
	owner     map[ServiceKey]proxy.ServicePortName
	// total is the virtual and real servers wanted (SyncResult.Total).
	total int
}

func newAccounts() *accounts {
	return &accounts{elems: map[string]map[string]int{}, vips: map[netip.Addr]int{},
		wanted: map[ServiceKey]int{}, nodePorts: map[ServiceKey]int{}, owner: map[ServiceKey]proxy.ServicePortName{}}
}

// elemKey names one element of one set.
type elemKey struct{ set, elem string }

// touched records what a change to the accounts may have flipped: each
// element with whether it was wanted before the change, and the VIPs.
type touched struct {
	elems map[elemKey]bool
	vips  map[netip.Addr]bool
}

func newTouched() *touched {
	return &touched{elems: map[elemKey]bool{}, vips: map[netip.Addr]bool{}}
}

// count adds (sign 1) or takes out (sign -1) the entries es of service
// port n; t, when not nil, records what it touched.
func (a *accounts) count(n proxy.ServicePortName, es []entry, sign int, t *touched) {
	for _, e := range es {
		entryElems(e, func(set, elem string) {
			m := a.elems[set]
			if m == nil {
				m = map[string]int{}
				a.elems[set] = m
			}
			if t != nil {
				k := elemKey{set, elem}
				if _, seen := t.elems[k]; !seen {
					t.elems[k] = m[elem] > 0
				}
			}
			if m[elem] += sign; m[elem] <= 0 {
				delete(m, elem)
			}
		})
		if e.bind {
			if a.vips[e.svc.Addr] += sign; a.vips[e.svc.Addr] <= 0 {
				delete(a.vips, e.svc.Addr)
			}
			if t != nil {
				t.vips[e.svc.Addr] = true
			}
		}
		if len(e.dests) == 0 {
			continue
		}
		k := e.svc.Key()
		a.total += sign * (1 + len(e.dests))
		if a.wanted[k] += sign; a.wanted[k] <= 0 {
			delete(a.wanted, k)
			delete(a.owner, k)
		} else if sign > 0 {
			a.owner[k] = n
		}
		if !e.bind {
			if a.nodePorts[k] += sign; a.nodePorts[k] <= 0 {
				delete(a.nodePorts, k)
			}
		}
	}
}

// flips are the element writes that bring the table from before the
// change t recorded to the accounts now.
func (a *accounts) flips(t *touched) []elemOp {
	var out []elemOp
	for k, was := range t.elems {
		if now := a.elems[k.set][k.elem] > 0; now != was {
			out = append(out, elemOp{del: was, set: k.set, elem: k.elem})
		}
	}
	return out
}

// entryElems calls emit with every element entry e puts in the table's
// sets and maps (the nodeports record apart).
func entryElems(e entry, emit func(set, elem string)) {
	k := vipKey(e.svc.Key())
	switch {
	case len(e.dests) == 0:
		emit(setNoEndpoints, k)
	case !e.external:
		emit(setClusterVIPs, k)
	case e.masq:
		emit(setExternal, k)
	}
	if len(e.sourceRanges) > 0 {
		emit(setFWGuarded, k)
		for _, r := range e.sourceRanges {
			emit(setFWAllowed, k+" . "+r.Masked().String())
		}
	}
	if e.inside.IsValid() {
		emit(mapInside, k+" : "+e.inside.Addr().String()+" . "+strconv.Itoa(int(e.inside.Port())))
		emit(setInside, k)
	}
	for _, d := range e.dests {
		emit(setHairpin, d.Addr.String()+" . "+strconv.Itoa(int(d.Port))+" . "+d.Addr.String())
	}
}
