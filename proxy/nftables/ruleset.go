package nftables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
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
)

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
	name  string
	isMap bool
	decl  string
}

// chainDef is a chain with its rules in canonical form (as `nft list`
// prints them back, so golden files, the Fake and the kernel agree). base
// is the "{ type ... hook ... }" part of base chains.
type chainDef struct {
	name  string
	base  string
	rules []string
}

// element is one set/map element; value is "" in plain sets.
type element struct {
	set, key, value string
}

func (e element) id() string { return e.set + "\x00" + e.key }

// objects is what one service port owns: its chains and affinity sets and
// its elements in the shared maps.
type objects struct {
	sets     []setDef
	chains   []chainDef
	elements []element
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
	}
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
			"meta mark & 0x00004000 == 0x00000000 return",
			"meta mark set meta mark ^ 0x00004000",
			"masquerade fully-random",
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

// balance renders load balancing over eps: affinity lookups first, then one
// rule per endpoint choosing it with probability 1/(endpoints left), so the
// choice is uniform. (A `numgen random mod N vmap { … }` creates one
// anonymous set per service, and the kernel names anonymous sets by scanning
// every set of the table: 10,000 services took 71 s to load instead of 4.)
func (w writer) balance(sp *proxy.ServicePort, eps []proxy.Endpoint, rules []string) []string {
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

func (w writer) endpoint(sp *proxy.ServicePort, e proxy.Endpoint) (chainDef, *setDef) {
	c := chainDef{name: endpointChain(sp.Name, e)}
	c.rules = append(c.rules, w.ipKw()+" saddr "+e.IP.String()+" "+markMasq) // hairpin
	var set *setDef
	if sp.AffinityTimeout > 0 {
		set = &setDef{
			name: affinitySet(sp.Name, e, sp.AffinityTimeout),
			decl: "{ type " + w.addrType() + " ; size 65535 ; flags dynamic,timeout ; timeout " + nftDuration(sp.AffinityTimeout) + " ; }",
		}
		c.rules = append(c.rules, "update @"+set.name+" { "+w.ipKw()+" saddr }")
	}
	c.rules = append(c.rules, "meta l4proto "+sp.Protocol.Lower()+" dnat to "+e.AddrPort().String())
	return c, set
}

// service renders everything one service port owns. The semantics follow
// the iptables data plane rule for rule (see proxy/doc.go).
func (w writer) service(snap *proxy.Snapshot, sp *proxy.ServicePort) *objects {
	o := &objects{}
	sel := sp.Selected
	ip := w.ipKw()
	internal := sel.InternalEndpoints(sp)
	external := sel.ExternalEndpoints(sp)
	masq := w.masqRule(snap, sp)
	hasCluster := sel.UsesCluster && len(sel.Cluster) > 0
	hasLocal := sel.UsesLocal && len(sel.Local) > 0

	if hasCluster {
		c := chainDef{name: serviceChain(sp.Name)}
		if masq != "" {
			c.rules = append(c.rules, masq)
		}
		c.rules = w.balance(sp, sel.Cluster, c.rules)
		o.chains = append(o.chains, c)
	}
	if hasLocal {
		c := chainDef{name: localChain(sp.Name)}
		if masq != "" && sp.InternalPolicyLocal {
			c.rules = append(c.rules, masq)
		}
		c.rules = w.balance(sp, sel.Local, c.rules)
		o.chains = append(o.chains, c)
	}
	for _, e := range sel.AllReachable {
		c, set := w.endpoint(sp, e)
		if set != nil {
			o.sets = append(o.sets, *set)
		}
		o.chains = append(o.chains, c)
	}

	goTo := func(chain string) string { return "goto " + chain }
	reject := goTo(chainReject)
	if len(internal) > 0 {
		target := serviceChain(sp.Name)
		if sp.InternalPolicyLocal {
			target = localChain(sp.Name)
		}
		o.elements = append(o.elements, element{mapServiceIPs, vipKey(sp.ClusterIP, sp.Protocol, sp.Port), goTo(target)})
	} else {
		o.elements = append(o.elements, element{mapNoEndpointServices, vipKey(sp.ClusterIP, sp.Protocol, sp.Port), reject})
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
			o.elements = append(o.elements, element{mapServiceIPs, vipKey(a, sp.Protocol, sp.Port), goTo(ext.name)})
		}
		for _, a := range sp.LoadBalancerIPs {
			o.elements = append(o.elements, element{mapServiceIPs, vipKey(a, sp.Protocol, sp.Port), goTo(ext.name)})
		}
		if sp.NodePort != 0 {
			o.elements = append(o.elements, element{mapServiceNodePorts, portKey(sp.Protocol, sp.NodePort), goTo(ext.name)})
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
			o.elements = append(o.elements, element{mapFirewallIPs, vipKey(a, sp.Protocol, sp.Port), goTo(fw.name)})
		}
	}
	if len(external) == 0 {
		for _, a := range sp.ExternalIPs {
			o.elements = append(o.elements, element{mapNoEndpointServices, vipKey(a, sp.Protocol, sp.Port), reject})
		}
		for _, a := range sp.LoadBalancerIPs {
			o.elements = append(o.elements, element{mapNoEndpointServices, vipKey(a, sp.Protocol, sp.Port), reject})
		}
		if sp.NodePort != 0 {
			o.elements = append(o.elements, element{mapNoEndpointNodePorts, portKey(sp.Protocol, sp.NodePort), reject})
		}
	}
	return o
}
