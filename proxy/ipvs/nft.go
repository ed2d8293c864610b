package ipvs

import (
	"fmt"
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
	// from pods and the node goes instead (entry.inside); setInside holds
	// its keys, for the marking rules: a kernel before 6.x refuses a map
	// as the set of a lookup (EINVAL on Debian's 6.1).
	mapInside = "inside"
	setInside = "inside-entries"
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

// table is the content of the mode's nft table for one sync: its chains,
// which depend on the snapshot's cluster CIDRs and masquerade-all only,
// and the elements of each set and map, sorted. A partial sync whose
// chains are those already written changes elements only
// (elementScript), so its cost is that of what changed, not of every
// service.
type table struct {
	family proxy.Family
	chains string
	elems  map[string][]string
}

// setDecl declares one set or map of the table.
type setDecl struct{ kind, name, typ, flags string }

// setDecls are the table's sets and maps, in the order they are written.
func setDecls(f proxy.Family) []setDecl {
	addrType := "ipv4_addr"
	if f == proxy.IPv6 {
		addrType = "ipv6_addr"
	}
	vipType := addrType + " . inet_proto . inet_service"
	return []setDecl{
		{"set", setClusterVIPs, vipType, ""},
		{"set", setExternal, vipType, ""},
		{"set", setNoEndpoints, vipType, ""},
		{"set", setFWGuarded, vipType, ""},
		{"set", setFWAllowed, vipType + " . " + addrType, "interval"},
		{"set", setHairpin, addrType + " . inet_service . " + addrType, ""},
		{"set", setNodePorts, vipType, ""},
		{"set", setInside, vipType, ""},
		{"map", mapInside, vipType + " : " + addrType + " . inet_service", ""},
	}
}

// tableOf is the table the accounts and the record of nodenet's NodePort
// virtual servers describe, with the chains given.
func tableOf(f proxy.Family, chains string, a *accounts, nodePorts map[ServiceKey]bool) *table {
	elems := map[string][]string{}
	for set, m := range a.elems {
		es := make([]string, 0, len(m))
		for e := range m {
			es = append(es, e)
		}
		slices.Sort(es)
		elems[set] = es
	}
	rec := make([]string, 0, len(nodePorts))
	for k := range nodePorts {
		rec = append(rec, vipKey(k))
	}
	slices.Sort(rec)
	elems[setNodePorts] = rec
	return &table{family: f, chains: chains, elems: elems}
}

// script replaces the whole table in one nft transaction (declared,
// deleted, written), so a sync never leaves it half-applied.
func (t *table) script() string {
	fam := nftFamily(t.family)
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("table %s %s {}", fam, TableName)
	p("delete table %s %s", fam, TableName)
	p("table %s %s {", fam, TableName)
	for _, d := range setDecls(t.family) {
		p("\t%s %s {", d.kind, d.name)
		p("\t\ttype %s", d.typ)
		if d.flags != "" {
			p("\t\tflags %s", d.flags)
		}
		if es := t.elems[d.name]; len(es) > 0 {
			p("\t\telements = { %s }", strings.Join(es, ", "))
		}
		p("\t}")
	}
	b.WriteString(t.chains)
	p("}")
	return b.String()
}

// elemOp adds or deletes one element of a set or map of the table.
type elemOp struct {
	del       bool
	set, elem string
}

// elementScript is the nft script of ops in one transaction: every
// deletion, then every addition, set by set in the table's order, each
// set's elements sorted ("" for no ops). A map's element is deleted by
// its key, so one whose value changed is deleted and added back.
func elementScript(f proxy.Family, ops []elemOp) string {
	if len(ops) == 0 {
		return ""
	}
	fam := nftFamily(f)
	del, add := map[string][]string{}, map[string][]string{}
	for _, op := range ops {
		if op.del {
			key, _, _ := strings.Cut(op.elem, " : ")
			del[op.set] = append(del[op.set], key)
		} else {
			add[op.set] = append(add[op.set], op.elem)
		}
	}
	var b strings.Builder
	for _, verb := range []string{"delete", "add"} {
		byset := add
		if verb == "delete" {
			byset = del
		}
		for _, d := range setDecls(f) {
			if es := byset[d.name]; len(es) > 0 {
				slices.Sort(es)
				fmt.Fprintf(&b, "%s element %s %s %s { %s }\n", verb, fam, TableName, d.name, strings.Join(es, ", "))
			}
		}
	}
	return b.String()
}

// chains renders the table's chains: fixed, but for the snapshot's
// cluster CIDRs and masquerade-all.
func chains(f proxy.Family, snap *proxy.Snapshot) string {
	ip := "ip"
	if f == proxy.IPv6 {
		ip = "ip6"
	}
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
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
		p("\t\t%s saddr %s %s @%s %s", ip, cidrs, vip, setInside, mark)
	}
	p("\t\tjump set-mark")
	p("\t}")
	p("\tchain output {")
	p("\t\ttype filter hook output priority -110; policy accept;")
	// The node's own connections to an eTP=Local entry point leave with
	// the VIP or a node address as source, which the endpoint, on
	// another node, cannot answer: masqueraded, as iptables mode does.
	p("\t\t%s @%s %s", vip, setInside, mark)
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
	p("\t\t%s daddr . th dport . %s saddr @%s masquerade", ip, ip, setHairpin)
	p("\t\tmeta mark & 0x%08x == 0 return", proxy.MasqueradeMark)
	p("\t\tmeta mark set meta mark ^ 0x%08x", proxy.MasqueradeMark)
	p("\t\tmasquerade") // port-preserving: see proxy's doc
	p("\t}")
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
