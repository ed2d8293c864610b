package nftables

import (
	"context"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/nlmsg"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestKernel runs the shared real-kernel suite (ClusterIP, NodePort,
// refusal, affinity, eTP Local + health check, UDP conntrack cleanup,
// hairpin over IPv4 and IPv6; bad input, restart) against nft in throwaway
// namespaces, one data plane per family.
func TestKernel(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	proxytest.KernelSuite(t, kernelPlane)
}

// kernelPlane is a Proxier programming node.
func kernelPlane(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
	r := &ExecRunner{Netns: node.Name()}
	t.Cleanup(func() { r.Close() })
	return New(f, r, testapi.Logger())
}

// TestKernelRepairOnDeletion: the proxy's table flushed, then deleted, by
// hand is noticed from the kernel's nf_tables announcements and repaired
// within a second or so, with no periodic check running; the proxy's own
// syncs force no repair.
func TestKernelRepairOnDeletion(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	proxytest.RepairSuite(t, kernelPlane,
		proxytest.Damage{Name: "nft flush table ip " + TableName, Do: func(t testing.TB, node *nettest.NS) {
			node.MustExec(t, "nft", "flush", "table", "ip", TableName)
		}},
		proxytest.Damage{Name: "nft delete table ip " + TableName, Do: func(t testing.TB, node *nettest.NS) {
			node.MustExec(t, "nft", "delete", "table", "ip", TableName)
		}},
	)
}

// TestRuleEncoderMatchesNft sends every rule shape the netlink path
// compiles to a kernel in a throwaway namespace and requires nft to list
// each back exactly as written, so a rule sent either way reads the same.
func TestRuleEncoderMatchesNft(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	cases := map[string][]string{
		"ip": {
			"ip daddr 10.96.0.10 tcp dport 80 ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x00004000",
			"ip daddr 10.96.0.10 udp dport 53 ip saddr != 10.240.0.0/12 ip saddr != 192.168.0.0/24 meta mark set meta mark | 0x00004000",
			"ip daddr 10.96.0.10 sctp dport 9999 meta mark set meta mark | 0x00004000",
			"meta l4proto tcp dnat ip to numgen random mod 2 offset 8192 map @endpoints-tcp-1",
			"meta l4proto udp dnat ip to numgen random mod 7 map @endpoints-udp-0",
			"meta l4proto sctp dnat ip to numgen random mod 1 offset 4294959104 map @endpoints-sctp-0",
		},
		"ip6": {
			"ip6 daddr fd00::10 tcp dport 80 ip6 saddr != fd10::/64 meta mark set meta mark | 0x00004000",
			"ip6 daddr fd00::10 udp dport 53 ip6 saddr != fd10::/60 meta mark set meta mark | 0x00004000",
			"meta l4proto tcp dnat ip6 to numgen random mod 3 offset 16384 map @endpoints-tcp-1",
			"meta l4proto udp dnat ip6 to numgen random mod 1 map @endpoints-udp-0",
		},
	}
	ns := nettest.New(t)
	r := &ExecRunner{Netns: ns.Name()}
	defer r.Close()
	ctx := context.Background()
	for fam, rules := range cases {
		w := writer{family: proxy.IPv4}
		if fam == "ip6" {
			w.family = proxy.IPv6
		}
		setup := "add table " + fam + " " + TableName + "\nadd chain " + fam + " " + TableName + " c\n"
		for _, m := range []string{"endpoints-tcp-1", "endpoints-udp-0", "endpoints-sctp-0"} {
			proto := strings.Split(m, "-")[1]
			setup += "add map " + fam + " " + TableName + " " + m + " { typeof numgen random mod 1 : " + w.ipKw() + " daddr . " + proto + " dport ; }\n"
		}
		if err := r.Apply(ctx, []byte(setup)); err != nil {
			t.Fatal(err)
		}
		for _, rule := range rules {
			if !ruleEncodable(fam, rule) {
				t.Errorf("%s: not encodable: %s", fam, rule)
				continue
			}
			ops := []Op{{Kind: OpFlushChain, Chain: "c"}, {Kind: OpAddRule, Chain: "c", Rule: rule}}
			if err := r.sendBatch(fam, TableName, ops); err != nil {
				t.Errorf("%s: %s: %v", fam, rule, err)
				continue
			}
			out, err := r.List(ctx, "list", "chain", fam, TableName, "c")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range strings.Split(string(out), "\n") {
				l = strings.TrimSpace(l)
				if l != "" && !strings.HasPrefix(l, "table ") && !strings.HasPrefix(l, "chain ") && l != "}" {
					got = append(got, l)
				}
			}
			if len(got) != 1 || got[0] != rule {
				t.Errorf("%s: sent  %s\nnft lists %q", fam, rule, got)
			}
		}
	}
	// What the encoder does not know goes to nft, not to the kernel half-done.
	for _, rule := range []string{"ip saddr @affinity-x goto endpoint-y", "masquerade fully-random", "meta l4proto tcp dnat to 10.0.0.1:80"} {
		if ruleEncodable("ip", rule) {
			t.Errorf("claims to encode %q", rule)
		}
	}
}

// ruleEncodable reports whether rule can go over netlink.
func ruleEncodable(family, rule string) bool {
	var w nlmsg.Writer
	w.Begin(nfnlSubsysNFTables<<8|nftMsgNewRule, 0)
	return encodeRule(&w, family, rule) == nil
}
