package ebpf

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// AutoInterfaces is the Config.Interfaces word (--bpf-tc-interfaces=auto)
// its caller replaces by NodeInterfaces' choice, so one manifest serves
// every node whatever its interfaces are called.
const AutoInterfaces = "auto"

// LinkAddrs is what the choice of tc interfaces reads of a link.
type LinkAddrs struct {
	Name     string
	Loopback bool
	Addrs    []netip.Addr
}

// internalPrefixes name the node's own plumbing, which can hold an address
// in a node address range but never carries traffic from other hosts to
// translate: the CNI bridge, flannel's devices (flannel.1, flannel-wg,
// flannel-v6.1) and the host ends of pod veths.
var internalPrefixes = []string{"cni0", "flannel", "veth"}

// SelectInterfaces returns, sorted, the links holding one of the node's
// addresses, except the loopback and the node's internal devices
// (internalPrefixes). The node's external interface is found by what it
// holds, not by its name or kind: in the local cluster it is a veth
// called eth0, on a machine a NIC, a bond or a bridge.
func SelectInterfaces(links []LinkAddrs, nodeAddrs []netip.Addr) []string {
	var out []string
	for _, l := range links {
		if l.Loopback || slices.ContainsFunc(internalPrefixes, func(p string) bool { return strings.HasPrefix(l.Name, p) }) {
			continue
		}
		if slices.ContainsFunc(l.Addrs, func(a netip.Addr) bool { return slices.Contains(nodeAddrs, a.Unmap()) }) {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out
}

// NodeInterfaces chooses the tc interfaces of this network namespace for
// the node's addresses (SelectInterfaces): the choice at start. The data
// plane then keeps it current as addresses come and go
// (Config.FollowNode, tcfollow.go).
func NodeInterfaces(nodeAddrs []netip.Addr) ([]string, error) {
	all, err := listLinkAddrs()
	if err != nil {
		return nil, fmt.Errorf("choose tc interfaces: %w", err)
	}
	chosen := SelectInterfaces(all, nodeAddrs)
	if len(chosen) == 0 {
		return nil, fmt.Errorf("choose tc interfaces: no interface holds one of the node's addresses %v (name them in --bpf-tc-interfaces instead of %s)", nodeAddrs, AutoInterfaces)
	}
	return chosen, nil
}
