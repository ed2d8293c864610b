package nftables

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodenet/nodenet/proxy"
)

// TableName is the table nodenet owns in the ip and ip6 families.
const TableName = "nodenet-proxy"

// Fixed maps and sets.
const (
	mapServiceIPs          = "service-ips"           // VIP . proto . port → goto service/local/external chain
	mapServiceNodePorts    = "service-nodeports"     // proto . nodeport → goto external chain
	mapNoEndpointServices  = "no-endpoint-services"  // VIP . proto . port → goto reject-chain
	mapNoEndpointNodePorts = "no-endpoint-nodeports" // proto . nodeport → goto reject-chain
	mapFirewallIPs         = "firewall-ips"          // LB IP . proto . port → goto firewall chain
	setNodePortIPs         = "nodeport-ips"          // --nodeport-addresses (unless all)
	setHairpin             = "hairpin-endpoints"     // endpoint . endpoint: a pod reaching itself
	prefixEndpointsMap     = "endpoints-"            // + protocol-shard: block|slot → endpoint address . port (see balance)
)

// endpointShards splits the endpoints maps: adding an element to a data
// map validates it against every rule bound to the map, and binding a rule
// walks every element, so one map for all services made a full sync
// quadratic (3.3 s of kernel time at 10,000 services, most of it there).
const endpointShards = 64

// endpointsMap is the map holding block blk's endpoints. nft wants the
// map's typeof to name the protocol the DNAT rule matches, hence one set of
// shards per protocol.
func endpointsMap(p proxy.Protocol, blk uint32) string {
	return prefixEndpointsMap + p.Lower() + "-" + strconv.Itoa(int(blk%endpointShards))
}

// Fixed chains.
const (
	chainNatPrerouting    = "nat-prerouting"
	chainNatOutput        = "nat-output"
	chainNatPostrouting   = "nat-postrouting"
	chainFilterPrerouting = "filter-prerouting"
	chainFilterOutputFW   = "filter-output-firewall"
	chainFilterInput      = "filter-input"
	chainFilterForward    = "filter-forward"
	chainFilterOutput     = "filter-output"
	chainServices         = "services"
	chainMasquerading     = "masquerading"
	chainReject           = "reject-chain"
	chainFirewallCheck    = "firewall-check"
	chainSvcEndpoints     = "service-endpoints-check"
	chainNodePortEPs      = "nodeport-endpoints-check"
)

// Per-service object prefixes; the rest of the name is a hash (so renamed
// or re-created objects never collide) plus the readable service name.
const (
	prefixService  = "service-"  // Cluster-policy endpoints
	prefixLocal    = "local-"    // Local-policy endpoints
	prefixExternal = "external-" // NodePort / external IP / LB entry
	prefixFirewall = "firewall-" // loadBalancerSourceRanges
	prefixEndpoint = "endpoint-" // DNAT to one endpoint (+ hairpin mark)
	prefixAffinity = "affinity-" // set of client IPs stuck to one endpoint
)

// setDef is a set or map declaration; decl is the body nft accepts and
// prints back field by field ("{ type ... ; }").
type setDef struct {
	name    string
	isMap   bool
	decl    string
	dynamic bool // filled by the data path (affinity): a full sync keeps its elements
	shared  bool // used by several services: partial syncs never delete it
	// recreate: a full sync deletes and re-adds the map instead of
	// flushing it. Binding a rule to a data map makes the kernel walk all
	// its elements (flushed ones too, until commit), so re-adding 10,000
	// rules to a full endpoints map took 19 s instead of 3.
	recreate bool
}

// chainDef is a chain with its rules in canonical form (as `nft list`
// prints them back, so golden files, the Fake and the kernel agree). base
// is the "{ type ... hook ... }" part of base chains.
type chainDef struct {
	name  string
	base  string
	rules []string
}

// element is one set/map element; value is "" in plain sets. A shared
// element (hairpin) may be wanted by several services: it stays while any
// of them does.
type element struct {
	set, key, value string
	shared          bool
}

func (e element) id() string { return e.set + "\x00" + e.key }

// objects is what one service port owns: its chains and affinity sets and
// its elements in the shared maps.
type objects struct {
	sets     []setDef
	chains   []chainDef
	elements []element
	blocks   []string // chains holding a block of @endpoints-* keys
}

func (o *objects) ruleCount() int {
	n := len(o.elements)
	for _, c := range o.chains {
		n += len(c.rules)
	}
	return n
}

// writer renders rules for one family.
type writer struct {
	family proxy.Family
}

func (w writer) nftFamily() string {
	if w.family == proxy.IPv6 {
		return "ip6"
	}
	return "ip"
}

// ipKw is the payload keyword: "ip saddr" / "ip6 saddr".
func (w writer) ipKw() string { return w.nftFamily() }

func (w writer) addrType() string {
	if w.family == proxy.IPv6 {
		return "ipv6_addr"
	}
	return "ipv4_addr"
}

func (w writer) loopback() string {
	if w.family == proxy.IPv6 {
		return "::1"
	}
	return "127.0.0.0/8"
}

// prefix renders a CIDR as nft prints it (a host prefix as a bare address).
func prefix(p netip.Prefix) string {
	p = p.Masked()
	if p.Bits() == p.Addr().BitLen() {
		return p.Addr().String()
	}
	return p.String()
}

const markMasq = "meta mark set meta mark | 0x00004000"

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func hash(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return b32.EncodeToString(h[:])[:8]
}

// readable turns a service port name into an nft identifier fragment
// ("ns/name/tcp/port"); ':' (IPv6) is not allowed unquoted, so it becomes '.'.
func readable(n proxy.ServicePortName) string {
	port := n.Port
	if port == "" {
		port = "_"
	}
	return n.Namespace + "/" + n.Name + "/" + n.Protocol.Lower() + "/" + port
}

func svcObjName(prefix string, n proxy.ServicePortName) string {
	return prefix + hash(prefix, n.String()) + "-" + readable(n)
}

func epSuffix(e proxy.Endpoint) string {
	return strings.ReplaceAll(e.IP.String(), ":", ".") + "/" + strconv.Itoa(int(e.Port))
}

func serviceChain(n proxy.ServicePortName) string  { return svcObjName(prefixService, n) }
func localChain(n proxy.ServicePortName) string    { return svcObjName(prefixLocal, n) }
func externalChain(n proxy.ServicePortName) string { return svcObjName(prefixExternal, n) }
func firewallChain(n proxy.ServicePortName) string { return svcObjName(prefixFirewall, n) }

func endpointChain(n proxy.ServicePortName, e proxy.Endpoint) string {
	return prefixEndpoint + hash(prefixEndpoint, n.String(), e.String()) + "-" + readable(n) + "__" + epSuffix(e)
}

// affinitySet includes the timeout in its hash: a set's timeout cannot be
// changed in place, so a new timeout means a new set.
func affinitySet(n proxy.ServicePortName, e proxy.Endpoint, timeout time.Duration) string {
	return prefixAffinity + hash(prefixAffinity, n.String(), e.String(), timeout.String()) + "-" + readable(n) + "__" + epSuffix(e)
}

// nftDuration renders d the way nft prints set timeouts ("3h", "1d2h3m4s").
func nftDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	var sb strings.Builder
	ms := d.Milliseconds()
	for _, u := range []struct {
		n   int64
		sfx string
	}{{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}} {
		if v := ms / u.n; v > 0 {
			sb.WriteString(strconv.FormatInt(v, 10) + u.sfx)
			ms -= v * u.n
		}
	}
	return sb.String()
}

// fixedSets are the shared maps and sets, in declaration order.
func (w writer) fixedSets() []setDef {
	vipKey := w.addrType() + " . inet_proto . inet_service : verdict"
	return []setDef{
		{name: mapServiceIPs, isMap: true, decl: "{ type " + vipKey + " ; }"},
		{name: mapServiceNodePorts, isMap: true, decl: "{ type inet_proto . inet_service : verdict ; }"},
		{name: mapNoEndpointServices, isMap: true, decl: "{ type " + vipKey + " ; }"},
		{name: mapNoEndpointNodePorts, isMap: true, decl: "{ type inet_proto . inet_service : verdict ; }"},
		{name: mapFirewallIPs, isMap: true, decl: "{ type " + vipKey + " ; }"},
		{name: setNodePortIPs, decl: "{ type " + w.addrType() + " ; }"},
		{name: setHairpin, decl: "{ type " + w.addrType() + " . " + w.addrType() + " ; }"},
	}
}

// addrField is the Field of this family's addresses.
func (w writer) addrField() Field {
	if w.family == proxy.IPv6 {
		return FieldIPv6
	}
	return FieldIPv4
}

// layout returns how elements of set are encoded on the element fast path,
// and false for verdict maps (they go through nft: a verdict element makes
// the kernel re-validate the chains anyway).
func (w writer) layout(set string) (Layout, bool) {
	a := w.addrField()
	switch {
	case set == setHairpin:
		return Layout{Key: []Field{a, a}}, true
	case set == setNodePortIPs:
		return Layout{Key: []Field{a}}, true
	case strings.HasPrefix(set, prefixEndpointsMap):
		return Layout{Key: []Field{FieldU32}, Value: []Field{a, FieldPort}}, true
	}
	return Layout{}, false
}

// fixedChains are the base chains and the shared chains behind them. Filter
// checks run after DNAT (priority filter) so they only see traffic no
// service chain took; the firewall runs before DNAT (it needs the LB IP).
func (w writer) fixedChains(snap *proxy.Snapshot) []chainDef {
	ip := w.ipKw()
	vip := ip + " daddr . meta l4proto . th dport"
	nodePortMatch := "fib daddr type local " + ip + " daddr != " + w.loopback()
	if !snap.NodePorts.All {
		nodePortMatch = ip + " daddr @" + setNodePortIPs
	}
	return []chainDef{
		{name: chainNatPrerouting, base: "{ type nat hook prerouting priority dstnat ; policy accept ; }", rules: []string{"jump " + chainServices}},
		{name: chainNatOutput, base: "{ type nat hook output priority -100 ; policy accept ; }", rules: []string{"jump " + chainServices}},
		{name: chainNatPostrouting, base: "{ type nat hook postrouting priority srcnat ; policy accept ; }", rules: []string{"jump " + chainMasquerading}},
		{name: chainFilterPrerouting, base: "{ type filter hook prerouting priority dstnat - 10 ; policy accept ; }", rules: []string{"ct state new jump " + chainFirewallCheck}},
		{name: chainFilterOutputFW, base: "{ type filter hook output priority -110 ; policy accept ; }", rules: []string{"ct state new jump " + chainFirewallCheck}},
		{name: chainFilterInput, base: "{ type filter hook input priority filter ; policy accept ; }", rules: []string{
			"ct state new jump " + chainNodePortEPs,
			"ct state new jump " + chainSvcEndpoints,
		}},
		{name: chainFilterForward, base: "{ type filter hook forward priority filter ; policy accept ; }", rules: []string{"ct state new jump " + chainSvcEndpoints}},
		{name: chainFilterOutput, base: "{ type filter hook output priority filter ; policy accept ; }", rules: []string{"ct state new jump " + chainSvcEndpoints}},
		{name: chainServices, rules: []string{
			vip + " vmap @" + mapServiceIPs,
			nodePortMatch + " meta l4proto . th dport vmap @" + mapServiceNodePorts,
		}},
		{name: chainMasquerading, rules: []string{
			// Hairpin: a pod reaching itself through a service must see
			// the node as the source, or it would answer itself directly.
			"ct status dnat " + ip + " saddr . " + ip + " daddr @" + setHairpin + " masquerade",
			"meta mark & 0x00004000 == 0x00000000 return",
			"meta mark set meta mark ^ 0x00004000",
			"masquerade", // port-preserving: see proxy's doc
		}},
		// TCP gets a reset (ECONNREFUSED at once, and no ICMP rate limit);
		// everything else port-unreachable.
		{name: chainReject, rules: []string{"reject with tcp reset", "reject"}},
		{name: chainFirewallCheck, rules: []string{vip + " vmap @" + mapFirewallIPs}},
		{name: chainSvcEndpoints, rules: []string{vip + " vmap @" + mapNoEndpointServices}},
		{name: chainNodePortEPs, rules: []string{nodePortMatch + " meta l4proto . th dport vmap @" + mapNoEndpointNodePorts}},
	}
}

func (w writer) fixedElements(snap *proxy.Snapshot) []element {
	var out []element
	if !snap.NodePorts.All {
		for _, a := range snap.NodePorts.Addrs {
			out = append(out, element{set: setNodePortIPs, key: a.String()})
		}
	}
	return out
}

func vipKey(a netip.Addr, proto proxy.Protocol, port uint16) string {
	return a.String() + " . " + proto.Lower() + " . " + strconv.Itoa(int(port))
}

func portKey(proto proxy.Protocol, port uint16) string {
	return proto.Lower() + " . " + strconv.Itoa(int(port))
}

// masqRule marks internal traffic from outside the cluster CIDRs (or all of
// it with --masquerade-all) for masquerading; "" when none is needed.
func (w writer) masqRule(snap *proxy.Snapshot, sp *proxy.ServicePort) string {
	ip := w.ipKw()
	base := ip + " daddr " + sp.ClusterIP.String() + " " + sp.Protocol.Lower() + " dport " + strconv.Itoa(int(sp.Port))
	switch {
	case snap.MasqueradeAll:
		return base + " " + markMasq
	case len(snap.ClusterCIDRs) > 0:
		for _, c := range snap.ClusterCIDRs {
			base += " " + ip + " saddr != " + prefix(c)
		}
		return base + " " + markMasq
	}
	return ""
}

// balance renders load balancing over eps into the rules of chain.
//
// Without session affinity — the common case — one rule DNATs through the
// shared data map @endpoints-<protocol>: `numgen random mod K offset B`
// picks one of the K keys B … B+K-1, each mapped to an endpoint address .
// port.
// Replacing an endpoint then only changes map elements, which commit
// without the kernel re-validating every chain (57–99 ms at 10,000
// services) and go over netlink without the nft CLI; only a change in the
// endpoint count rewrites the rule. One map for all services, not one per
// service: the kernel finds sets by name in a list, and 10,000 named maps
// made a full sync 5× slower. B is the chain's block of keys (see blocks),
// slots follow the endpoints' sorted order.
//
// With ClientIP affinity the choice must be remembered per endpoint, so
// affinity lookups come first, then one rule per endpoint choosing it with
// probability 1/(endpoints left) — a uniform choice — and going to its
// endpoint chain, which records the client. (A `numgen … vmap { … }`
// would create an anonymous set per service, and the kernel names those by
// scanning every set of the table: 71 s instead of 4 s at 10,000 services.)
func (w writer) balance(sp *proxy.ServicePort, eps []proxy.Endpoint, chain string, alloc *blocks, o *objects, endpoints map[netip.AddrPort]bool) []string {
	if sp.AffinityTimeout == 0 && len(eps) <= slotsPerBlock {
		if base, ok := alloc.get(chain); ok {
			return []string{w.mapBalance(sp, eps, chain, base, o)}
		}
	}
	// Affinity, more endpoints than a block holds, or no block left: one
	// chain per endpoint (shared by the service's chains).
	var rules []string
	for _, e := range eps {
		if !endpoints[e.AddrPort()] {
			endpoints[e.AddrPort()] = true
			w.endpoint(sp, e, o)
		}
	}
	if sp.AffinityTimeout > 0 {
		for _, e := range eps {
			rules = append(rules, w.ipKw()+" saddr @"+affinitySet(sp.Name, e, sp.AffinityTimeout)+" goto "+endpointChain(sp.Name, e))
		}
	}
	for i, e := range eps {
		if left := len(eps) - i; left > 1 {
			rules = append(rules, "numgen random mod "+strconv.Itoa(left)+" 0 goto "+endpointChain(sp.Name, e))
		} else {
			rules = append(rules, "goto "+endpointChain(sp.Name, e))
		}
	}
	return rules
}

// mapBalance fills chain's block (first key base) of its endpoints map
// and returns the DNAT rule through it.
func (w writer) mapBalance(sp *proxy.ServicePort, eps []proxy.Endpoint, chain string, base uint32, o *objects) string {
	o.blocks = append(o.blocks, chain)
	m := endpointsMap(sp.Protocol, base>>slotBits)
	if !slices.ContainsFunc(o.sets, func(s setDef) bool { return s.name == m }) {
		o.sets = append(o.sets, setDef{name: m, isMap: true, recreate: true, shared: true,
			decl: "{ typeof numgen random mod 1 : " + w.ipKw() + " daddr . " + sp.Protocol.Lower() + " dport ; }"})
	}
	for i, e := range eps {
		o.elements = append(o.elements, element{set: m, key: strconv.FormatUint(uint64(base)+uint64(i), 10),
			value: e.IP.String() + " . " + strconv.Itoa(int(e.Port))})
	}
	offset := ""
	if base != 0 {
		offset = " offset " + strconv.FormatUint(uint64(base), 10)
	}
	return "meta l4proto " + sp.Protocol.Lower() + " dnat " + w.ipKw() + " to numgen random mod " + strconv.Itoa(len(eps)) + offset + " map @" + m
}

// endpoint adds the chain of one endpoint to o: with ClientIP affinity it
// records the client in the endpoint's affinity set; then DNAT.
func (w writer) endpoint(sp *proxy.ServicePort, e proxy.Endpoint, o *objects) {
	c := chainDef{name: endpointChain(sp.Name, e)}
	if sp.AffinityTimeout > 0 {
		set := setDef{
			name:    affinitySet(sp.Name, e, sp.AffinityTimeout),
			decl:    "{ type " + w.addrType() + " ; size 65535 ; flags dynamic,timeout ; timeout " + nftDuration(sp.AffinityTimeout) + " ; }",
			dynamic: true,
		}
		o.sets = append(o.sets, set)
		c.rules = append(c.rules, "update @"+set.name+" { "+w.ipKw()+" saddr }")
	}
	c.rules = append(c.rules, "meta l4proto "+sp.Protocol.Lower()+" dnat to "+e.AddrPort().String())
	o.chains = append(o.chains, c)
}

// service renders everything one service port owns. The semantics follow
// the iptables data plane rule for rule (see proxy/doc.go).
func (w writer) service(snap *proxy.Snapshot, sp *proxy.ServicePort, alloc *blocks) *objects {
	o := &objects{}
	sel := sp.Selected
	ip := w.ipKw()
	internal := sel.InternalEndpoints(sp)
	external := sel.ExternalEndpoints(sp)
	masq := w.masqRule(snap, sp)
	hasCluster := sel.UsesCluster && len(sel.Cluster) > 0
	hasLocal := sel.UsesLocal && len(sel.Local) > 0
	endpoints := map[netip.AddrPort]bool{} // endpoint chains written

	if hasCluster {
		c := chainDef{name: serviceChain(sp.Name)}
		if masq != "" {
			c.rules = append(c.rules, masq)
		}
		c.rules = append(c.rules, w.balance(sp, sel.Cluster, c.name, alloc, o, endpoints)...)
		o.chains = append(o.chains, c)
	}
	if hasLocal {
		c := chainDef{name: localChain(sp.Name)}
		if masq != "" && sp.InternalPolicyLocal {
			c.rules = append(c.rules, masq)
		}
		c.rules = append(c.rules, w.balance(sp, sel.Local, c.name, alloc, o, endpoints)...)
		o.chains = append(o.chains, c)
	}
	hairpin := map[netip.Addr]bool{}
	for _, e := range sel.AllReachable {
		if !hairpin[e.IP] {
			hairpin[e.IP] = true
			o.elements = append(o.elements, element{set: setHairpin, key: e.IP.String() + " . " + e.IP.String(), shared: true})
		}
	}

	goTo := func(chain string) string { return "goto " + chain }
	reject := goTo(chainReject)
	if len(internal) > 0 {
		target := serviceChain(sp.Name)
		if sp.InternalPolicyLocal {
			target = localChain(sp.Name)
		}
		o.elements = append(o.elements, element{set: mapServiceIPs, key: vipKey(sp.ClusterIP, sp.Protocol, sp.Port), value: goTo(target)})
	} else {
		o.elements = append(o.elements, element{set: mapNoEndpointServices, key: vipKey(sp.ClusterIP, sp.Protocol, sp.Port), value: reject})
	}
	if !sp.ExternallyAccessible() {
		return o
	}

	if len(external) > 0 || (sp.ExternalPolicyLocal && hasCluster) {
		ext := chainDef{name: externalChain(sp.Name)}
		if !sp.ExternalPolicyLocal {
			ext.rules = append(ext.rules, markMasq, goTo(serviceChain(sp.Name)))
		} else {
			if hasCluster {
				// Pods and the node itself reaching an eTP=Local entry
				// point are "internal": any endpoint will do.
				for _, c := range snap.ClusterCIDRs {
					ext.rules = append(ext.rules, ip+" saddr "+prefix(c)+" "+goTo(serviceChain(sp.Name)))
				}
				ext.rules = append(ext.rules,
					"fib saddr type local "+markMasq,
					"fib saddr type local "+goTo(serviceChain(sp.Name)))
			}
			if hasLocal {
				ext.rules = append(ext.rules, goTo(localChain(sp.Name)))
			}
		}
		o.chains = append(o.chains, ext)
		for _, a := range sp.ExternalIPs {
			o.elements = append(o.elements, element{set: mapServiceIPs, key: vipKey(a, sp.Protocol, sp.Port), value: goTo(ext.name)})
		}
		for _, a := range sp.LoadBalancerIPs {
			o.elements = append(o.elements, element{set: mapServiceIPs, key: vipKey(a, sp.Protocol, sp.Port), value: goTo(ext.name)})
		}
		if sp.NodePort != 0 {
			o.elements = append(o.elements, element{set: mapServiceNodePorts, key: portKey(sp.Protocol, sp.NodePort), value: goTo(ext.name)})
		}
	}
	if len(sp.LoadBalancerIPs) > 0 && len(sp.LoadBalancerSourceRanges) > 0 {
		fw := chainDef{name: firewallChain(sp.Name)}
		for _, r := range sp.LoadBalancerSourceRanges {
			if r.Bits() == 0 {
				fw.rules = append(fw.rules, "return")
				continue
			}
			fw.rules = append(fw.rules, ip+" saddr "+prefix(r)+" return")
		}
		fw.rules = append(fw.rules, "drop")
		o.chains = append(o.chains, fw)
		for _, a := range sp.LoadBalancerIPs {
			o.elements = append(o.elements, element{set: mapFirewallIPs, key: vipKey(a, sp.Protocol, sp.Port), value: goTo(fw.name)})
		}
	}
	if len(external) == 0 {
		for _, a := range sp.ExternalIPs {
			o.elements = append(o.elements, element{set: mapNoEndpointServices, key: vipKey(a, sp.Protocol, sp.Port), value: reject})
		}
		for _, a := range sp.LoadBalancerIPs {
			o.elements = append(o.elements, element{set: mapNoEndpointServices, key: vipKey(a, sp.Protocol, sp.Port), value: reject})
		}
		if sp.NodePort != 0 {
			o.elements = append(o.elements, element{set: mapNoEndpointNodePorts, key: portKey(sp.Protocol, sp.NodePort), value: reject})
		}
	}
	return o
}

// Keys of @endpoints: the upper bits are a block owned by one load-
// balancing chain, the lower slotBits its endpoint slots.
const (
	slotBits      = 13
	slotsPerBlock = 1 << slotBits // endpoints per service port (kube's scalability limit is 5,000)
	numBlocks     = 1 << (32 - slotBits)
)

// blocks assigns each load-balancing chain a block of @endpoints-* keys. A
// chain keeps its block while it exists; a new chain starts at a block
// derived from its name and takes the next free one, so a full sync of the
// same services gives (barring collisions) the blocks partial syncs gave.
type blocks struct {
	byChain map[string]uint32
	owner   map[uint32]string
}

func newBlocks() *blocks {
	return &blocks{byChain: map[string]uint32{}, owner: map[uint32]string{}}
}

func (b *blocks) clone() *blocks {
	return &blocks{byChain: maps.Clone(b.byChain), owner: maps.Clone(b.owner)}
}

// get returns chain's first key; false when every block is taken.
func (b *blocks) get(chain string) (uint32, bool) {
	if blk, ok := b.byChain[chain]; ok {
		return blk << slotBits, true
	}
	if len(b.owner) >= numBlocks {
		return 0, false
	}
	h := sha256.Sum256([]byte(chain))
	blk := binary.BigEndian.Uint32(h[:4]) % numBlocks
	for {
		if _, taken := b.owner[blk]; !taken {
			break
		}
		blk = (blk + 1) % numBlocks
	}
	b.byChain[chain], b.owner[blk] = blk, chain
	return blk << slotBits, true
}

// release frees chain's block.
func (b *blocks) release(chain string) {
	if blk, ok := b.byChain[chain]; ok {
		delete(b.byChain, chain)
		delete(b.owner, blk)
	}
}
