package flanneld

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/nodenet/nodenet/internal/iptables"
)

// Masquerade backends (--masq-backend).
const (
	MasqIPTables = "iptables"
	MasqNFTables = "nftables"
)

// Chain and table names. They are ours alone (upstream uses FLANNEL-*), so
// nodenet and a leftover upstream flanneld never fight over one chain.
const (
	chainMasq   = "NODENET-FLANNEL-MASQ"
	chainFwd    = "NODENET-FLANNEL-FWD"
	nftTable    = "nodenet-flannel"
	kubeMark    = "0x4000"
	commentMasq = "nodenet flanneld masq"
	commentFwd  = "nodenet flanneld forward"
)

// masqFamily is what the rules of one IP family depend on.
type masqFamily struct {
	is4     bool
	network netip.Prefix // the cluster network
	subnet  netip.Prefix // this node's pod subnet
}

func (f masqFamily) family() iptables.Family {
	if f.is4 {
		return iptables.IPv4
	}
	return iptables.IPv6
}

func (f masqFamily) multicast() string {
	if f.is4 {
		return "224.0.0.0/4"
	}
	return "ff00::/8"
}

// masqFamilies returns the families masquerading applies to.
func masqFamilies(cfg *Config, own Lease) []masqFamily {
	var out []masqFamily
	if cfg.EnableIPv4 {
		out = append(out, masqFamily{is4: true, network: cfg.Network, subnet: own.Subnet})
	}
	if cfg.EnableIPv6 {
		out = append(out, masqFamily{network: cfg.IPv6Network, subnet: own.IPv6Subnet})
	}
	return out
}

// masquerader converges the masquerade and forward rules.
type masquerader interface {
	// Sync makes the rules right, writing only when they are not.
	Sync(ctx context.Context) (changed bool, err error)
	// Cleanup removes everything this backend ever installed and says
	// what that was (nothing: nil).
	Cleanup(ctx context.Context) (removed []string, err error)
}

// iptablesRules returns the rules of our two chains (NODENET-FLANNEL-MASQ
// in nat, NODENET-FLANNEL-FWD in filter) as iptables-save prints them, in
// upstream flannel's order: kube-proxy-marked packets are left to
// kube-proxy, pod↔cluster traffic is not NATed, traffic from outside to
// our pods is not NATed, pods → outside (but not multicast) and the host →
// pods elsewhere are masqueraded with a fully random source port.
func iptablesRules(f masqFamily) (nat, filter []string) {
	c := fmt.Sprintf(`-m comment --comment "%s"`, commentMasq)
	nw, sn := f.network.String(), f.subnet.String()
	nat = []string{
		fmt.Sprintf("-m mark --mark %s/%s %s -j RETURN", kubeMark, kubeMark, c),
		fmt.Sprintf("-s %s -d %s %s -j RETURN", sn, nw, c),
		fmt.Sprintf("-s %s -d %s %s -j RETURN", nw, sn, c),
		fmt.Sprintf("! -s %s -d %s %s -j RETURN", nw, sn, c),
		fmt.Sprintf("-s %s ! -d %s %s -j MASQUERADE --random-fully", nw, f.multicast(), c),
		fmt.Sprintf("! -s %s -d %s %s -j MASQUERADE --random-fully", nw, nw, c),
	}
	fc := fmt.Sprintf(`-m comment --comment "%s"`, commentFwd)
	filter = []string{
		fmt.Sprintf("-s %s %s -j ACCEPT", nw, fc),
		fmt.Sprintf("-d %s %s -j ACCEPT", nw, fc),
	}
	return nat, filter
}

// nftRuleset returns the whole table for one family, same rules as
// iptablesRules, as an nft -f script that replaces the table atomically.
func nftRuleset(f masqFamily) string {
	fam, ip := "ip", "ip"
	if !f.is4 {
		fam, ip = "ip6", "ip6"
	}
	nw, sn := f.network.String(), f.subnet.String()
	var b strings.Builder
	fmt.Fprintf(&b, "add table %s %s\ndelete table %s %s\n", fam, nftTable, fam, nftTable)
	fmt.Fprintf(&b, "table %s %s {\n", fam, nftTable)
	fmt.Fprintf(&b, "\tchain postrtg {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n")
	fmt.Fprintf(&b, "\t\tmeta mark & %s == %s return\n", kubeMark, kubeMark)
	fmt.Fprintf(&b, "\t\t%s saddr %s %s daddr %s return\n", ip, sn, ip, nw)
	fmt.Fprintf(&b, "\t\t%s saddr %s %s daddr %s return\n", ip, nw, ip, sn)
	fmt.Fprintf(&b, "\t\t%s saddr != %s %s daddr %s return\n", ip, nw, ip, sn)
	fmt.Fprintf(&b, "\t\t%s saddr %s %s daddr != %s masquerade fully-random\n", ip, nw, ip, f.multicast())
	fmt.Fprintf(&b, "\t\t%s saddr != %s %s daddr %s masquerade fully-random\n", ip, nw, ip, nw)
	fmt.Fprintf(&b, "\t}\n")
	fmt.Fprintf(&b, "\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n")
	fmt.Fprintf(&b, "\t\t%s saddr %s accept\n\t\t%s daddr %s accept\n", ip, nw, ip, nw)
	fmt.Fprintf(&b, "\t}\n}\n")
	return b.String()
}
