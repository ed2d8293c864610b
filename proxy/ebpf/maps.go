package ebpf

import (
	"encoding/binary"
	"math"
	"net/netip"

	"github.com/nodenet/nodenet/proxy"
)

// The map types are the ones bpf2go generated from bpf/socklb.c, so the
// Go side cannot write a layout the programs do not read.
type (
	svcKey     = socklbSvcKey
	svcValue   = socklbSvcValue
	backendKey = socklbBackendKey
	addrPort   = socklbAddrport
)

// flagAffinity is SVC_AFFINITY in bpf/lbmaps.h.
const flagAffinity = 1

// flagInside is SVC_INSIDE and scopeInside SCOPE_INSIDE in bpf/lbmaps.h:
// an entry point with flagInside has a second entry, its key's Scope
// scopeInside, holding the endpoints for clients inside the cluster.
const (
	flagInside  = 8
	scopeInside = 1
)

// scopeWildcard is SCOPE_WILDCARD in bpf/lbmaps.h: a NodePort on every
// local address (NodePorts.All), its key's address zero; the programs take
// it for a destination without an exact entry that local_addrs holds.
const scopeWildcard = 2

// clusterCIDRsID is CLUSTER_CIDRS_ID in bpf/lbmaps.h: the src_ranges id
// listing the cluster CIDRs, which entry point ids (from 1) never take.
const clusterCIDRsID = 0

// protoNumbers are the IPPROTO_* values bpf_sock_addr.protocol holds.
var protoNumbers = map[proxy.Protocol]uint8{proxy.TCP: 6, proxy.UDP: 17, proxy.SCTP: 132}

// addrWords lays a out as the programs read bpf_sock_addr.user_ip4/6: the
// address bytes in network order, IPv4 in the first word.
func addrWords(a netip.Addr) [4]uint32 {
	var w [4]uint32
	if a.Unmap().Is4() {
		b := a.Unmap().As4()
		w[0] = binary.NativeEndian.Uint32(b[:])
		return w
	}
	b := a.As16()
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

// wordsAddr is the inverse of addrWords for family f.
func wordsAddr(w [4]uint32, f proxy.Family) netip.Addr {
	var b [16]byte
	for i := range w {
		binary.NativeEndian.PutUint32(b[4*i:], w[i])
	}
	if f == proxy.IPv4 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

// swapPort converts a port between host order and the network order
// user_port holds (the conversion is its own inverse).
func swapPort(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

func backendOf(ep proxy.Endpoint) addrPort {
	return addrPort{Addr: addrWords(ep.IP), Port: swapPort(ep.Port)}
}

func backendsOf(eps []proxy.Endpoint) []addrPort {
	var out []addrPort
	for _, ep := range eps {
		out = append(out, backendOf(ep))
	}
	return out
}

// entry is what one service entry point (address, port, protocol) should
// hold in the maps.
type entry struct {
	key      svcKey
	flags    uint32
	affinity uint32 // seconds
	backends []addrPort
	ranges   []netip.Prefix // allowed sources with flagSrcRanges (tc path)
}

// entries lists sp's entry points that socket-level load balancing serves:
// the ClusterIP with the endpoints internal traffic uses; externalIPs, LB
// IPs and the NodePort with the external ones. The NodePort is one
// wildcard entry (scopeWildcard) with NodePorts.All, which the programs
// answer on every address in local_addrs (localaddrs.go), else one entry
// per --nodeport-addresses address. An unknown protocol yields none.
//
// With externalTrafficPolicy Local (and internalTrafficPolicy Cluster) each
// external entry point also gets an inside entry (scopeInside, flagInside
// on the ordinary one) with the internal endpoints: traffic from inside the
// cluster — every socket the socket programs see, and pod sources on the tc
// path — reaches the cluster-wide endpoints, as the other modes send it
// (kubernetes#71596), instead of being refused on a node without local
// ones. With internalTrafficPolicy Local both sets are the local
// endpoints, so no inside entry is needed.
func entries(snap *proxy.Snapshot, sp *proxy.ServicePort) []entry {
	proto, ok := protoNumbers[sp.Protocol]
	if !ok {
		return nil
	}
	var flags, aff uint32
	if sp.AffinityTimeout > 0 {
		flags = flagAffinity
		aff = uint32(min(math.Ceil(sp.AffinityTimeout.Seconds()), math.MaxUint32))
	}
	mk := func(a netip.Addr, port uint16, eps []proxy.Endpoint) entry {
		return entry{key: svcKey{Addr: addrWords(a), Port: swapPort(port), Proto: proto}, flags: flags, affinity: aff,
			backends: backendsOf(eps)}
	}
	internal := sp.Selected.InternalEndpoints(sp)
	out := []entry{mk(sp.ClusterIP, sp.Port, internal)}
	external := sp.Selected.ExternalEndpoints(sp)
	for _, a := range sp.ExternalIPs {
		out = append(out, mk(a, sp.Port, external))
	}
	for _, a := range sp.LoadBalancerIPs {
		out = append(out, withSourceRanges(mk(a, sp.Port, external), snap.Family, sp.LoadBalancerSourceRanges))
	}
	if sp.NodePort != 0 && snap.NodePorts.All {
		e := mk(netip.Addr{}, sp.NodePort, external)
		e.key.Scope = scopeWildcard
		out = append(out, e)
	} else if sp.NodePort != 0 {
		for _, a := range snap.NodePorts.Addrs {
			if snap.Family.Contains(a) {
				out = append(out, mk(a, sp.NodePort, external))
			}
		}
	}
	if !sp.ExternalPolicyLocal {
		return out
	}
	n := len(out)
	for i := 1; i < n; i++ { // every entry point but the ClusterIP
		out[i].flags |= flagKeepSource
		if sp.InternalPolicyLocal {
			continue
		}
		// A pod's address is routable in the cluster: the inside entry
		// keeps the source too, as iptables' -s clusterCIDR jump does.
		in := out[i]
		in.key.Scope |= scopeInside
		in.backends = backendsOf(internal)
		out[i].flags |= flagInside
		out = append(out, in)
	}
	return out
}

// assignSlots places want in backend slots, starting from old: a backend
// that stays keeps its slot (so ClientIP affinity, which remembers slots,
// survives other endpoints coming and going), newcomers fill the holes of
// removed ones, and leftover holes are closed by moving the last backend
// in.
func assignSlots(old, want []addrPort) []addrPort {
	wanted := make(map[addrPort]bool, len(want))
	for _, b := range want {
		wanted[b] = true
	}
	slots := make([]addrPort, 0, len(want))
	placed := make(map[addrPort]bool, len(want))
	var holes []int
	for _, b := range old {
		if wanted[b] && !placed[b] {
			placed[b] = true
		} else {
			holes = append(holes, len(slots))
		}
		slots = append(slots, b)
	}
	for _, b := range want {
		if placed[b] {
			continue
		}
		placed[b] = true
		if len(holes) > 0 {
			slots[holes[0]] = b
			holes = holes[1:]
		} else {
			slots = append(slots, b)
		}
	}
	isHole := make(map[int]bool, len(holes))
	for _, h := range holes {
		isHole[h] = true
	}
	for len(holes) > 0 {
		last := len(slots) - 1
		if isHole[last] {
			delete(isHole, last)
			holes = removeInt(holes, last)
		} else {
			h := holes[0]
			holes = holes[1:]
			delete(isHole, h)
			slots[h] = slots[last]
		}
		slots = slots[:last]
	}
	return slots
}

func removeInt(s []int, v int) []int {
	for i, x := range s {
		if x == v {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// netipAddrPort shows a map's address and network-order port.
func netipAddrPort(a [4]uint32, port uint16, f proxy.Family) netip.AddrPort {
	return netip.AddrPortFrom(wordsAddr(a, f), swapPort(port))
}
