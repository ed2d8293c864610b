package cni

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"

	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// ipMasq: traffic from the node's pod subnet to anywhere outside it leaves
// with the node's address. The bridge plugin installs a chain per pod; one
// chain per network and family is enough, because the rule depends only on
// the subnet, so steady-state ADDs cost one `iptables -C`. The rules stay
// when pods go: they are the network's, like flanneld's own masquerading.
// iptables is exec'd (it speaks nft or legacy as the node is set up), so
// the binary links no firewall library.

func masqChain(network string) string {
	return "NODENET-MASQ-" + hash32(network)
}

func ensureMasq(ctx context.Context, n *network, allocs []hostlocal.Allocation) error {
	seen := map[netip.Prefix]bool{}
	for _, a := range allocs {
		subnet := a.Address.Masked()
		if seen[subnet] {
			continue
		}
		seen[subnet] = true
		if err := ensureMasqSubnet(ctx, n.name, subnet); err != nil {
			return err
		}
	}
	return nil
}

func ensureMasqSubnet(ctx context.Context, network string, subnet netip.Prefix) error {
	bin, multicast := "iptables", "224.0.0.0/4"
	if subnet.Addr().Is6() {
		bin, multicast = "ip6tables", "ff00::/8"
	}
	chain := masqChain(network)
	jump := []string{"POSTROUTING", "-s", subnet.String(), "-m", "comment", "--comment", "nodenet-cni " + network, "-j", chain}
	if ok, err := iptablesCheck(ctx, bin, jump); err != nil || ok {
		return err
	}
	if err := iptables(ctx, bin, "-N", chain); err != nil && !errors.Is(err, errExists) {
		return err
	}
	for _, rule := range [][]string{
		{chain, "-d", subnet.String(), "-j", "RETURN"},
		{chain, "!", "-d", multicast, "-j", "MASQUERADE"},
		jump,
	} {
		ok, err := iptablesCheck(ctx, bin, rule)
		if err != nil {
			return err
		}
		if !ok {
			if err := iptables(ctx, bin, append([]string{"-A"}, rule...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

var (
	errExists  = errors.New("already exists")
	errMissing = errors.New("does not exist")
)

func iptables(ctx context.Context, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, append([]string{"-w", "-t", "nat"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		switch msg := stderr.Bytes(); {
		case bytes.Contains(msg, []byte("already exists")):
			return errExists
		case bytes.Contains(msg, []byte("does not exist")), bytes.Contains(msg, []byte("No chain/target/match")):
			return fmt.Errorf("%s: %w", bytes.TrimSpace(msg), errMissing)
		}
		return fmt.Errorf("%s -t nat %v: %w: %s", bin, args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// iptablesCheck runs -C: exit status 1 means "no such rule"; a missing
// chain (the jump's target) is reported as such; anything else is a real
// failure.
func iptablesCheck(ctx context.Context, bin string, rule []string) (bool, error) {
	err := iptables(ctx, bin, append([]string{"-C"}, rule...)...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errMissing), errors.As(err, &ee) && ee.ExitCode() == 1:
		return false, nil
	default:
		return false, err
	}
}
