package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/nodenet/nodenet/proxy"
)

// Chain-name prefix and fixed chains. The per-service prefixes below are
// followed by a 16-character hash (28 characters, the kernel's limit).
const (
	Prefix = "NODENET-"

	chainServices    = "NODENET-SERVICES"
	chainNodePorts   = "NODENET-NODEPORTS"
	chainMarkMasq    = "NODENET-MARK-MASQ"
	chainPostrouting = "NODENET-POSTROUTING"
	chainFirewall    = "NODENET-FIREWALL"
	chainForward     = "NODENET-FORWARD"

	prefixSVC      = "NODENET-SVC-"
	prefixSVL      = "NODENET-SVL-"
	prefixEXT      = "NODENET-EXT-"
	prefixFW       = "NODENET-FW-"
	prefixAffinity = "NODENET-AFF-" // recent lists, not chains
)

// Owns reports whether chain is one of the proxy's: its fixed chains and
// the per-service ones. Prefix alone would also claim chains of other
// nodenet daemons that share the node's tables (flanneld's
// NODENET-FLANNEL-MASQ), and a full sync or a clean-up deletes every
// chain it owns that it did not declare.
func Owns(chain string) bool {
	switch chain {
	case chainServices, chainNodePorts, chainMarkMasq, chainPostrouting, chainFirewall, chainForward:
		return true
	}
	for _, p := range []string{prefixSVC, prefixSVL, prefixEXT, prefixFW} {
		if strings.HasPrefix(chain, p) {
			return true
		}
	}
	return false
}

// jumpsToOwned reports whether a rule of a built-in chain jumps (or goes)
// to one of the proxy's chains.
func jumpsToOwned(rule string) bool {
	f := strings.Fields(rule)
	for i := 0; i+1 < len(f); i++ {
		if (f[i] == "-j" || f[i] == "-g") && Owns(f[i+1]) {
			return true
		}
	}
	return false
}

const (
	tableNAT    = "nat"
	tableFilter = "filter"
)

// hook is a jump from a built-in chain into one of ours.
type hook struct {
	table, chain, rule string
}

// hooks are kept in place by full syncs and removed by Cleanup.
var hooks = []hook{
	{tableNAT, "PREROUTING", `-m comment --comment "nodenet service portals" -j NODENET-SERVICES`},
	{tableNAT, "OUTPUT", `-m comment --comment "nodenet service portals" -j NODENET-SERVICES`},
	{tableNAT, "POSTROUTING", `-m comment --comment "nodenet postrouting rules" -j NODENET-POSTROUTING`},
	{tableFilter, "INPUT", `-m conntrack --ctstate NEW -m comment --comment "nodenet service rejects" -j NODENET-SERVICES`},
	{tableFilter, "FORWARD", `-m conntrack --ctstate NEW -m comment --comment "nodenet service rejects" -j NODENET-SERVICES`},
	{tableFilter, "OUTPUT", `-m conntrack --ctstate NEW -m comment --comment "nodenet service rejects" -j NODENET-SERVICES`},
	{tableFilter, "INPUT", `-m conntrack --ctstate NEW -m comment --comment "nodenet load balancer firewall" -j NODENET-FIREWALL`},
	{tableFilter, "FORWARD", `-m conntrack --ctstate NEW -m comment --comment "nodenet load balancer firewall" -j NODENET-FIREWALL`},
	{tableFilter, "OUTPUT", `-m conntrack --ctstate NEW -m comment --comment "nodenet load balancer firewall" -j NODENET-FIREWALL`},
	{tableFilter, "FORWARD", `-m comment --comment "nodenet forwarding rules" -j NODENET-FORWARD`},
}

// fixedChains are (re)written by every full sync.
var fixedChains = []struct{ table, chain string }{
	{tableNAT, chainServices}, {tableNAT, chainNodePorts}, {tableNAT, chainMarkMasq}, {tableNAT, chainPostrouting},
	{tableFilter, chainServices}, {tableFilter, chainFirewall}, {tableFilter, chainForward},
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func hashName(prefix string, parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return prefix + b32.EncodeToString(h[:])[:16]
}

func svcChain(n proxy.ServicePortName) string { return hashName(prefixSVC, n.String()) }
func svlChain(n proxy.ServicePortName) string { return hashName(prefixSVL, n.String()) }
func extChain(n proxy.ServicePortName) string { return hashName(prefixEXT, n.String()) }
func fwChain(n proxy.ServicePortName) string  { return hashName(prefixFW, n.String()) }

// affinityList names the `recent` list remembering clients of one endpoint
// (shared by the cluster and local chains, like kube-proxy's SEP chains).
func affinityList(n proxy.ServicePortName, e proxy.Endpoint) string {
	return hashName(prefixAffinity, n.String(), e.String())
}

// chain is one owned chain and its rules (without "-A NAME ").
type chain struct {
	name  string
	rules []string
}

// serviceRules is everything one service port contributes: its own nat
// chains and its rules in the shared chains.
type serviceRules struct {
	chains      []chain  // nat
	natServices []string // in nat NODENET-SERVICES
	natNodePort []string // in nat NODENET-NODEPORTS
	filterSvc   []string // in filter NODENET-SERVICES
	filterFW    []string // in filter NODENET-FIREWALL
}

func (r *serviceRules) ruleCount() int {
	n := len(r.natServices) + len(r.natNodePort) + len(r.filterSvc) + len(r.filterFW)
	for _, c := range r.chains {
		n += len(c.rules)
	}
	return n
}

// ruleWriter renders canonical (iptables-save) rule text.
type ruleWriter struct {
	family proxy.Family
	sb     strings.Builder
}

func (w *ruleWriter) host(a netip.Addr) string {
	if w.family == proxy.IPv6 {
		return a.String() + "/128"
	}
	return a.String() + "/32"
}

// rejectWith answers TCP with a reset (ECONNREFUSED at once, and unlike
// ICMP not subject to the kernel's per-host ICMP rate limit) and everything
// else with port-unreachable.
func (w *ruleWriter) rejectWith(proto proxy.Protocol) string {
	if proto == proxy.TCP {
		return "tcp-reset"
	}
	if w.family == proxy.IPv6 {
		return "icmp6-port-unreachable"
	}
	return "icmp-port-unreachable"
}

func (w *ruleWriter) mask() string {
	if w.family == proxy.IPv6 {
		return "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	}
	return "255.255.255.255"
}

// dst renders "-d IP -p P -m comment --comment C -m P --dport N" (empty parts
// omitted), the canonical order iptables-save prints.
func (w *ruleWriter) dst(d netip.Addr, proto proxy.Protocol, comment string, port uint16, extra string) string {
	w.sb.Reset()
	if d.IsValid() {
		w.sb.WriteString("-d ")
		w.sb.WriteString(w.host(d))
		w.sb.WriteByte(' ')
	}
	w.sb.WriteString("-p ")
	w.sb.WriteString(proto.Lower())
	w.sb.WriteByte(' ')
	if extra != "" {
		w.sb.WriteString(extra)
		w.sb.WriteByte(' ')
	}
	if comment != "" {
		w.sb.WriteString(`-m comment --comment "`)
		w.sb.WriteString(comment)
		w.sb.WriteString(`" `)
	}
	w.sb.WriteString("-m ")
	w.sb.WriteString(proto.Lower())
	w.sb.WriteString(" --dport ")
	w.sb.WriteString(strconv.Itoa(int(port)))
	return w.sb.String()
}

// probability renders p the way iptables-save prints it back (the kernel
// keeps it as a 31-bit fraction), so partial syncs can delete the rule by
// its text.
func probability(p float64) string {
	v := math.Round(p * 0x80000000)
	return strconv.FormatFloat(v/0x80000000, 'f', 11, 64)
}

// masqRule marks internal traffic from outside the cluster CIDR (or all of
// it with --masquerade-all) for masquerading. "" when not needed.
func (w *ruleWriter) masqRule(snap *proxy.Snapshot, sp *proxy.ServicePort) string {
	base := w.dst(sp.ClusterIP, sp.Protocol, "", sp.Port, "")
	switch {
	case snap.MasqueradeAll:
		return base + " -j " + chainMarkMasq
	case len(snap.ClusterCIDRs) > 0:
		return "! -s " + snap.ClusterCIDRs[0].String() + " " + base + " -j " + chainMarkMasq
	}
	return ""
}

// endpointRules renders the load-balancing rules of a SVC/SVL chain. The
// endpoints are inlined (no per-endpoint chain): iptables-nft's restore time
// grows quadratically with the number of chains, and per-endpoint chains
// tripled it (10,000 services: 30,000 chains, minutes per full sync).
//
// Hairpin: a packet whose source is one of the endpoints is marked for
// masquerade before load balancing, so a pod reaching itself through its
// service gets the reply back through the node. (Unlike kube-proxy's
// per-endpoint chains this also masquerades such a pod when it lands on
// another endpoint of the same service.)
func (w *ruleWriter) endpointRules(sp *proxy.ServicePort, eps []proxy.Endpoint, rules []string) []string {
	mark := fmt.Sprintf("-j MARK --set-xmark %#x/%#x", proxy.MasqueradeMark, proxy.MasqueradeMark)
	for _, e := range eps {
		rules = append(rules, "-s "+w.host(e.IP)+" "+mark)
	}
	proto := "-p " + sp.Protocol.Lower()
	if sp.AffinityTimeout > 0 {
		secs := int(sp.AffinityTimeout.Seconds())
		for _, e := range eps {
			rules = append(rules, fmt.Sprintf("%s -m recent --update --seconds %d --reap --name %s --mask %s --rsource -j DNAT --to-destination %s",
				proto, secs, affinityList(sp.Name, e), w.mask(), e.AddrPort()))
		}
	}
	for i, e := range eps {
		r := proto
		if left := len(eps) - i; left > 1 {
			r += " -m statistic --mode random --probability " + probability(1/float64(left))
		}
		if sp.AffinityTimeout > 0 {
			r += " -m recent --set --name " + affinityList(sp.Name, e) + " --mask " + w.mask() + " --rsource"
		}
		rules = append(rules, r+" -j DNAT --to-destination "+e.AddrPort().String())
	}
	return rules
}

// serviceRules renders everything for one service port.
func (w *ruleWriter) serviceRules(snap *proxy.Snapshot, sp *proxy.ServicePort) *serviceRules {
	r := &serviceRules{}
	sel := sp.Selected
	name := sp.Name.String()
	internal := sel.InternalEndpoints(sp)
	external := sel.ExternalEndpoints(sp)
	masq := w.masqRule(snap, sp)

	if sel.UsesCluster && len(sel.Cluster) > 0 {
		c := chain{name: svcChain(sp.Name)}
		if masq != "" {
			c.rules = append(c.rules, masq)
		}
		c.rules = w.endpointRules(sp, sel.Cluster, c.rules)
		r.chains = append(r.chains, c)
	}
	if sel.UsesLocal && len(sel.Local) > 0 {
		c := chain{name: svlChain(sp.Name)}
		if masq != "" && sp.InternalPolicyLocal {
			c.rules = append(c.rules, masq)
		}
		c.rules = w.endpointRules(sp, sel.Local, c.rules)
		r.chains = append(r.chains, c)
	}

	if len(internal) > 0 {
		target := svcChain(sp.Name)
		if sp.InternalPolicyLocal {
			target = svlChain(sp.Name)
		}
		r.natServices = append(r.natServices, w.dst(sp.ClusterIP, sp.Protocol, name+" cluster IP", sp.Port, "")+" -j "+target)
	} else {
		r.filterSvc = append(r.filterSvc, w.dst(sp.ClusterIP, sp.Protocol, name+" has no endpoints", sp.Port, "")+" -j REJECT --reject-with "+w.rejectWith(sp.Protocol))
	}

	if !sp.ExternallyAccessible() {
		return r
	}
	hasCluster := sel.UsesCluster && len(sel.Cluster) > 0
	if len(external) > 0 || (sp.ExternalPolicyLocal && hasCluster) {
		ext := chain{name: extChain(sp.Name)}
		if !sp.ExternalPolicyLocal {
			ext.rules = append(ext.rules, "-j "+chainMarkMasq, "-j "+svcChain(sp.Name))
		} else {
			if hasCluster {
				// Pods and the node itself reaching an eTP=Local entry
				// point are "internal": any endpoint will do.
				for _, c := range snap.ClusterCIDRs {
					ext.rules = append(ext.rules, "-s "+c.String()+" -j "+svcChain(sp.Name))
				}
				ext.rules = append(ext.rules,
					"-m addrtype --src-type LOCAL -j "+chainMarkMasq,
					"-m addrtype --src-type LOCAL -j "+svcChain(sp.Name))
			}
			if len(sel.Local) > 0 {
				ext.rules = append(ext.rules, "-j "+svlChain(sp.Name))
			}
		}
		r.chains = append(r.chains, ext)
		for _, a := range sp.ExternalIPs {
			r.natServices = append(r.natServices, w.dst(a, sp.Protocol, name+" external IP", sp.Port, "")+" -j "+ext.name)
		}
		if len(sp.LoadBalancerIPs) > 0 {
			target := ext.name
			if len(sp.LoadBalancerSourceRanges) > 0 {
				fw := chain{name: fwChain(sp.Name)}
				for _, src := range sp.LoadBalancerSourceRanges {
					fw.rules = append(fw.rules, "-s "+src.String()+" -j "+ext.name)
				}
				r.chains = append(r.chains, fw)
				target = fw.name
				// Whatever the FW chain did not DNAT still has the LB IP as
				// destination in the filter table: drop it there.
				for _, a := range sp.LoadBalancerIPs {
					r.filterFW = append(r.filterFW, w.dst(a, sp.Protocol, name+" traffic not accepted by source ranges", sp.Port, "")+" -j DROP")
				}
			}
			for _, a := range sp.LoadBalancerIPs {
				r.natServices = append(r.natServices, w.dst(a, sp.Protocol, name+" loadbalancer IP", sp.Port, "")+" -j "+target)
			}
		}
		if sp.NodePort != 0 {
			r.natNodePort = append(r.natNodePort, w.dst(netip.Addr{}, sp.Protocol, name+" nodeport", sp.NodePort, "")+" -j "+ext.name)
		}
	}
	if len(external) == 0 {
		reject := " -j REJECT --reject-with " + w.rejectWith(sp.Protocol)
		for _, a := range sp.ExternalIPs {
			r.filterSvc = append(r.filterSvc, w.dst(a, sp.Protocol, name+" has no external endpoints", sp.Port, "")+reject)
		}
		for _, a := range sp.LoadBalancerIPs {
			r.filterSvc = append(r.filterSvc, w.dst(a, sp.Protocol, name+" has no external endpoints", sp.Port, "")+reject)
		}
		if sp.NodePort != 0 {
			if snap.NodePorts.All {
				r.filterSvc = append(r.filterSvc, w.dst(netip.Addr{}, sp.Protocol, name+" has no external endpoints", sp.NodePort, "-m addrtype --dst-type LOCAL")+reject)
			} else {
				for _, a := range snap.NodePorts.Addrs {
					r.filterSvc = append(r.filterSvc, w.dst(a, sp.Protocol, name+" has no external endpoints", sp.NodePort, "")+reject)
				}
			}
		}
	}
	return r
}

// fixedRules renders the fixed chains' own rules (the tail of nat
// NODENET-SERVICES and the static chains).
func (w *ruleWriter) fixedRules(snap *proxy.Snapshot) map[string][]string {
	m := map[string][]string{}
	if snap.NodePorts.All {
		m["nat/"+chainServices] = []string{`-m addrtype --dst-type LOCAL -m comment --comment "nodenet service nodeports; NOTE: this must be the last rule in this chain" -j ` + chainNodePorts}
	} else {
		for _, a := range snap.NodePorts.Addrs {
			m["nat/"+chainServices] = append(m["nat/"+chainServices], "-d "+w.host(a)+` -m comment --comment "nodenet service nodeports; NOTE: this must be the last rule in this chain" -j `+chainNodePorts)
		}
	}
	mark := fmt.Sprintf("%#x", proxy.MasqueradeMark)
	m["nat/"+chainMarkMasq] = []string{"-j MARK --set-xmark " + mark + "/" + mark}
	m["nat/"+chainPostrouting] = []string{
		"-m mark ! --mark " + mark + "/" + mark + " -j RETURN",
		"-j MARK --set-xmark " + mark + "/0x0",
		// Port-preserving, not --random-fully: see proxy's doc.
		`-m comment --comment "nodenet service traffic requiring SNAT" -j MASQUERADE`,
	}
	m["filter/"+chainForward] = []string{
		"-m conntrack --ctstate INVALID -j DROP",
		"-m mark --mark " + mark + "/" + mark + ` -m comment --comment "nodenet forwarding rules" -j ACCEPT`,
		`-m comment --comment "nodenet forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
	}
	return m
}
