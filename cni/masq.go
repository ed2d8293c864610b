package cni

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// ipMasq: traffic from the node's pod subnet to anywhere outside it leaves
// with the node's address. The bridge plugin installs a chain per pod; one
// chain per network and family is enough, because the rule depends only on
// the subnet, so a steady-state ADD only lists POSTROUTING. The rules stay
// when pods go: they are the network's, like flanneld's own masquerading.
// iptables is exec'd through internal/iptables, which links no firewall
// library and picks the backend (nft or legacy) the node's other
// components use.

func masqChain(network string) string {
	return "NODENET-MASQ-" + hash32(network)
}

func ensureMasq(ctx context.Context, n *network, allocs []hostlocal.Allocation) error {
	var subnets []netip.Prefix
	for _, a := range allocs {
		if s := a.Address.Masked(); !slices.Contains(subnets, s) {
			subnets = append(subnets, s)
		}
	}
	return masquerade(ctx, iptables.Direct, n.name, subnets)
}

// masquerade ensures the rules of network for each subnet, through exec,
// with the iptables backend each family's rules already live in.
func masquerade(ctx context.Context, exec iptables.Exec, network string, subnets []netip.Prefix) error {
	runners := map[iptables.Family]iptables.Runner{}
	for _, subnet := range subnets {
		fam := iptables.IPv4
		if subnet.Addr().Is6() {
			fam = iptables.IPv6
		}
		r, ok := runners[fam]
		if !ok {
			var err error
			if r, err = iptables.Open(ctx, exec, fam); err != nil {
				return fmt.Errorf("ipMasq: %w", err)
			}
			runners[fam] = r
		}
		if err := ensureMasqSubnet(ctx, r, network, subnet); err != nil {
			return err
		}
	}
	return nil
}

// ensureMasqSubnet adds what is missing of the network's chain, its rules
// for subnet and the jump from POSTROUTING, in one iptables-restore. The
// jump is written last, so its presence means the rest is there.
func ensureMasqSubnet(ctx context.Context, r iptables.Runner, network string, subnet netip.Prefix) error {
	multicast := "224.0.0.0/4"
	if subnet.Addr().Is6() {
		multicast = "ff00::/8"
	}
	chain := masqChain(network)
	// Rules as iptables-save prints them, so that listing finds them.
	jump := fmt.Sprintf(`-s %s -m comment --comment "nodenet-cni %s" -j %s`, subnet, network, chain)
	hooks, _, err := r.ListChain(ctx, "nat", "POSTROUTING")
	if err != nil {
		return fmt.Errorf("ipMasq: %w", err)
	}
	if slices.Contains(hooks, jump) {
		return nil
	}
	have, exists, err := r.ListChain(ctx, "nat", chain)
	if err != nil {
		return fmt.Errorf("ipMasq: %w", err)
	}
	b := iptables.NewBatch()
	if !exists {
		b.Declare("nat", chain)
	}
	for _, rule := range []string{"-d " + subnet.String() + " -j RETURN", "! -d " + multicast + " -j MASQUERADE"} {
		if !slices.Contains(have, rule) {
			b.Append("nat", chain, rule)
		}
	}
	b.Append("nat", "POSTROUTING", jump)
	if err := r.Restore(ctx, b.Bytes()); err != nil {
		return fmt.Errorf("ipMasq for %s: %w", subnet, err)
	}
	return nil
}
