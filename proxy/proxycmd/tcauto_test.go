package proxycmd

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/proxy"
)

// TestTCNodeAddrs: --bpf-tc-interfaces=auto looks for the Node's
// InternalIP and ExternalIP and the local addresses inside
// --nodeport-addresses' CIDRs; other Node address types and local
// addresses outside the CIDRs do not count.
func TestTCNodeAddrs(t *testing.T) {
	a := netip.MustParseAddr
	node := &corev1.Node{Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "172.30.0.11"},
		{Type: corev1.NodeExternalIP, Address: "203.0.113.7"},
		{Type: corev1.NodeHostName, Address: "node-1"},
		{Type: corev1.NodeInternalDNS, Address: "node-1.local"},
	}}}
	npa := proxy.NodePortAddresses{CIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}, Primary: true}
	local := []netip.Addr{a("127.0.0.1"), a("172.30.0.11"), a("192.168.5.1"), a("10.244.1.1")}
	got := tcNodeAddrs(node, npa, local)
	want := []netip.Addr{a("172.30.0.11"), a("192.168.5.1"), a("203.0.113.7")}
	if !slices.Equal(got, want) {
		t.Errorf("tcNodeAddrs = %v, want %v", got, want)
	}
}

func TestTCAutoAlone(t *testing.T) {
	if err := (ebpfFlags{tcInterfaces: cli.StringList{"auto"}}).validate(); err != nil {
		t.Errorf("auto alone: %v", err)
	}
	if err := (ebpfFlags{tcInterfaces: cli.StringList{"eth0", "eth1"}}).validate(); err != nil {
		t.Errorf("named interfaces: %v", err)
	}
	err := (ebpfFlags{tcInterfaces: cli.StringList{"eth0", "auto"}}).validate()
	if err == nil || !strings.Contains(err.Error(), `--bpf-tc-interfaces eth0,auto: "auto" chooses every interface`) {
		t.Errorf("auto beside a name: err = %v", err)
	}
}
