package ipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/nodenet/nodenet/proxy"
)

// TableName is the nft table of the ipvs mode, one per family ("ip" and
// "ip6"): the small fixed rule set IPVS needs around it. IPVS forwards; the
// table marks what must be masqueraded (MasqueradeMark), masquerades it
// and hairpin traffic, refuses entry points without endpoints and guards
// LB IPs with their source ranges. Only its set elements grow with the
// number of services.
const TableName = "nodenet-ipvs"

// Set names.
const (
	setClusterVIPs = "cluster-vips"  // ClusterIP entry points
	setExternal    = "external-masq" // external entry points under eTP=Cluster
	setNoEndpoints = "no-endpoints"  // refused entry points
	setFWGuarded   = "fw-guarded"    // LB entry points with source ranges
	setFWAllowed   = "fw-allowed"    // LB entry point . allowed source range
	setHairpin     = "hairpin"       // endpoint . port . endpoint
	// mapInside: eTP=Local entry point → ClusterIP . port, where traffic
	// from pods and the node goes instead (entry.inside).
	mapInside = "inside"
	// setNodePorts is no rule's: it records the virtual servers on node
	// addresses (NodePorts) nodenet made, so a full sync and Cleanup, in
	// this process or a later one, delete those and no other IPVS user's
	// on the same addresses (keepalived/LVS). Virtual servers on the VIP
	// device's addresses need no record: the device is nodenet's.
	setNodePorts = "nodeports"
)

func nftFamily(f proxy.Family) string {
	if f == proxy.IPv6 {
		return "ip6"
	}
	return "ip"
}

// ruleset renders the whole table for the entries of a snapshot and the
// record of nodenet's NodePort virtual servers: it is replaced in one nft
// transaction (declared, deleted, written), so a sync never leaves it
// half-applied.
func ruleset(f proxy.Family, snap *proxy.Snapshot, all []entry, nodePorts []ServiceKey) string {
	fam := nftFamily(f)
	ip, addrType := "ip", "ipv4_addr"
	if f == proxy.IPv6 {
		ip, addrType = "ip6", "ipv6_addr"
	}
	vipType := addrType + " . inet_proto . inet_service"
	var cluster, external, none, guarded, allowed, hairpin, recorded, inside []string
	for _, k := range nodePorts {
		recorded = append(recorded, vipKey(k))
	}
	for _, e := range all {
		k := vipKey(e.svc.Key())
		switch {
		case len(e.dests) == 0:
			none = append(none, k)
		case !e.external:
			cluster = append(cluster, k)
		case e.masq:
			external = append(external, k)
		}
		if len(e.sourceRanges) > 0 {
			guarded = append(guarded, k)
			for _, r := range e.sourceRanges {
				allowed = append(allowed, k+" . "+r.Masked().String())
			}
		}
		if e.inside.IsValid() {
			inside = append(inside, k+" : "+e.inside.Addr().String()+" . "+strconv.Itoa(int(e.inside.Port())))
		}
		for _, d := range e.dests {
			hairpin = append(hairpin, d.Addr.String()+" . "+strconv.Itoa(int(d.Port))+" . "+d.Addr.String())
		}
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("table %s %s {}", fam, TableName)
	p("delete table %s %s", fam, TableName)
	p("table %s %s {", fam, TableName)
	decl := func(kind, name, typ, flags string, elems []string) {
		slices.Sort(elems)
		elems = slices.Compact(elems)
		p("\t%s %s {", kind, name)
		p("\t\ttype %s", typ)
		if flags != "" {
			p("\t\tflags %s", flags)
		}
		if len(elems) > 0 {
			p("\t\telements = { %s }", strings.Join(elems, ", "))
		}
		p("\t}")
	}
	set := func(name, typ, flags string, elems []string) { decl("set", name, typ, flags, elems) }
	set(setClusterVIPs, vipType, "", cluster)
	set(setExternal, vipType, "", external)
	set(setNoEndpoints, vipType, "", none)
	set(setFWGuarded, vipType, "", guarded)
	set(setFWAllowed, vipType+" . "+addrType, "interval", allowed)
	set(setHairpin, addrType+" . inet_service . "+addrType, "", hairpin)
	set(setNodePorts, vipType, "", recorded)
	decl("map", mapInside, vipType+" : "+addrType+" . inet_service", "", inside)
	vip := ip + " daddr . meta l4proto . th dport"
	mark := fmt.Sprintf("meta mark set meta mark | 0x%08x", proxy.MasqueradeMark)
	var cidrs string
	if len(snap.ClusterCIDRs) > 0 {
		var cs []string
		for _, c := range snap.ClusterCIDRs {
			cs = append(cs, c.Masked().String())
		}
		cidrs = "{ " + strings.Join(cs, ", ") + " }"
	}
	// Marking runs before IPVS takes the packet (LOCAL_IN at priority 98,
	// LOCAL_OUT at -99), before filtering and before the inside redirect
	// (dstnat), so it sees the address the client used.
	p("\tchain prerouting {")
	p("\t\ttype filter hook prerouting priority -110; policy accept;")
	p("\t\t%s @%s %s . %s saddr != @%s drop", vip, setFWGuarded, vip, ip, setFWAllowed)
	if snap.MasqueradeAll && cidrs != "" {
		// Pods redirected to a ClusterIP are masqueraded like those
		// reaching it directly.
		p("\t\t%s saddr %s %s @%s %s", ip, cidrs, vip, mapInside, mark)
	}
	p("\t\tjump set-mark")
	p("\t}")
	p("\tchain output {")
	p("\t\ttype filter hook output priority -110; policy accept;")
	// The node's own connections to an eTP=Local entry point leave with
	// the VIP or a node address as source, which the endpoint, on
	// another node, cannot answer: masqueraded, as iptables mode does.
	p("\t\t%s @%s %s", vip, mapInside, mark)
	p("\t\tjump set-mark")
	p("\t}")
	p("\tchain set-mark {")
	p("\t\t%s @%s %s", vip, setExternal, mark)
	switch {
	case snap.MasqueradeAll:
		p("\t\t%s @%s %s", vip, setClusterVIPs, mark)
	case cidrs != "":
		p("\t\t%s saddr != %s %s @%s %s", ip, cidrs, vip, setClusterVIPs, mark)
	}
	p("\t}")
	// The inside redirect (kubernetes#71596): pods (by --cluster-cidr)
	// and the node reaching an eTP=Local entry point go to the Service's
	// ClusterIP, whose virtual server has every endpoint; others reach
	// the entry point's own virtual server (local endpoints) or refusal.
	redirect := fmt.Sprintf("meta l4proto { tcp, udp, sctp } dnat %s to %s map @%s", ip, vip, mapInside)
	p("\tchain nat-prerouting {")
	p("\t\ttype nat hook prerouting priority dstnat; policy accept;")
	if cidrs != "" {
		p("\t\t%s saddr %s %s", ip, cidrs, redirect)
	}
	p("\t}")
	p("\tchain nat-output {")
	p("\t\ttype nat hook output priority -100; policy accept;")
	p("\t\t%s", redirect)
	p("\t}")
	// Refusal: an entry point without endpoints has no virtual server, so
	// its packets reach INPUT; TCP gets a reset (ECONNREFUSED at once),
	// the rest port-unreachable.
	p("\tchain input {")
	p("\t\ttype filter hook input priority filter; policy accept;")
	p("\t\t%s @%s jump refuse", vip, setNoEndpoints)
	p("\t}")
	p("\tchain refuse {")
	p("\t\tmeta l4proto tcp reject with tcp reset")
	p("\t\treject")
	p("\t}")
	p("\tchain postrouting {")
	p("\t\ttype nat hook postrouting priority srcnat; policy accept;")
	// Hairpin: a pod reaching itself through a service must see the node
	// as the source, or it would answer itself directly.
	p("\t\t%s daddr . th dport . %s saddr @%s masquerade fully-random", ip, ip, setHairpin)
	p("\t\tmeta mark & 0x%08x == 0 return", proxy.MasqueradeMark)
	p("\t\tmeta mark set meta mark ^ 0x%08x", proxy.MasqueradeMark)
	p("\t\tmasquerade fully-random")
	p("\t}")
	p("}")
	return b.String()
}

// vipKey is k as an element of the address . protocol . port sets.
func vipKey(k ServiceKey) string {
	return k.Addr.String() + " . " + k.Protocol.Lower() + " . " + strconv.Itoa(int(k.Port))
}

// cleanupScript deletes the table of family f if it exists.
func cleanupScript(f proxy.Family) string {
	return fmt.Sprintf("table %s %s {}\ndelete table %s %s\n", nftFamily(f), TableName, nftFamily(f), TableName)
}

// bindAddrs are the addresses entries put on the VIP device.
func bindAddrs(all []entry) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, e := range all {
		if e.bind {
			out[e.svc.Addr] = true
		}
	}
	return out
}
