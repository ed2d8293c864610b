package flanneld

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

// kernelSnapshot is everything a daemon could change in a namespace, as
// the kernel's own tools print it.
func kernelSnapshot(t *testing.T, ns *nettest.NS) string {
	t.Helper()
	var b strings.Builder
	for _, cmd := range [][]string{
		{"ip", "-d", "link", "show"}, {"ip", "addr", "show"}, {"ip", "route", "show", "table", "all"},
		{"ip", "-6", "route", "show", "table", "all"}, {"ip", "neigh", "show"}, {"bridge", "fdb", "show"},
		{"iptables-save"}, {"ip6tables-save"}, {"nft", "list", "ruleset"},
	} {
		out, err := ns.Exec(t.Context(), cmd[0], cmd[1:]...)
		if err != nil && !strings.Contains(cmd[0], "tables") {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
		b.WriteString("### " + strings.Join(cmd, " ") + "\n")
		// iptables-save prints a timestamp; drop comment lines. ip link
		// warns when it resolves a veth peer's namespace name while
		// another test removes some namespace: noise, not our change.
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "Error: Peer netns reference is invalid") {
				b.WriteString(l + "\n")
			}
		}
	}
	return b.String()
}

// TestBadConfigTouchesNothing runs the whole daemon on every bad
// net-conf.json and on bad interface settings: each fails with the stated
// error, and the node namespace is exactly as before.
func TestBadConfigTouchesNothing(t *testing.T) {
	ns := nettest.New(t)
	peer := nettest.New(t)
	// Without DAD, the link-local address is final at once and the
	// snapshots compare only what the daemon could have changed.
	for _, n := range []*nettest.NS{ns, peer} {
		if err := n.Do(func() error { return os.WriteFile("/proc/sys/net/ipv6/conf/default/accept_dad", []byte("0"), 0o644) }); err != nil {
			t.Fatal(err)
		}
	}
	nettest.Link(t, ns, "eth0", "192.168.50.11/24", peer, "eth0", "192.168.50.12/24")
	// The veth's carrier (and with it the link-local address and its
	// route) comes a moment after the link is up: a snapshot taken
	// before then differs from every later one (seen once in CI).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l, err := ns.Handle().LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := ns.Handle().AddrList(l, unix.AF_INET6)
		if err != nil {
			t.Fatal(err)
		}
		if l.Attrs().OperState == netlink.OperUp && len(addrs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("eth0 not up with a link-local address after 5s: %s, %v", l.Attrs().OperState, addrs)
		}
	}
	before := kernelSnapshot(t, ns)
	good := `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`
	type tc struct {
		name, conf string
		mutate     func(*Options)
		says       string
	}
	var cases []tc
	for _, b := range badConfigs {
		cases = append(cases, tc{name: "conf/" + b.name, conf: b.json, says: b.says})
	}
	cases = append(cases,
		tc{"overlaps node network", `{"Network":"192.168.0.0/16","Backend":{"Type":"vxlan"}}`, nil, "Network: 192.168.0.0/16 overlaps the node network 192.168.50.0/24 on eth0"},
		tc{"no such iface", good, func(o *Options) { o.Iface.Ifaces = []string{"eth9", "10.9.9.9"} }, "--iface eth9: no interface has that name"},
		tc{"regex matches nothing", good, func(o *Options) { o.Iface = IfaceOptions{IfaceRegex: []*regexp.Regexp{regexp.MustCompile("^wlan")}} }, "--iface-regex ^wlan: no interface"},
		tc{"no default route", good, func(o *Options) { o.Iface = IfaceOptions{} }, "no default route"},
		tc{"unreachable can-reach", good, func(o *Options) { o.Iface = IfaceOptions{CanReach: netip.MustParseAddr("8.8.8.8")} }, "--iface-can-reach 8.8.8.8: no route"},
		tc{"bad masq backend", good, func(o *Options) { o.MasqBackend = "pf" }, `--masq-backend "pf"`},
		tc{"bad cni template", good, func(o *Options) { o.InstallCNIConf, o.CNIConfTemplate = "x", "{{.Nope" }, "parse CNI conf template"},
		tc{"v6 public ip as v4", good, func(o *Options) { o.Iface.PublicIP = netip.MustParseAddr("fd00::1") }, "--public-ip fd00::1"},
		tc{"no node name", good, func(o *Options) { o.NodeName = "" }, "node name is required"},
		tc{"bad tx checksum flag", good, func(o *Options) { o.VXLANTxChecksumOffload = "maybe" }, `--vxlan-tx-checksum-offload "maybe": want auto, on or off`},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			conf := filepath.Join(dir, "net-conf.json")
			if err := os.WriteFile(conf, []byte(c.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			o := Options{NodeName: "n1", Client: fake.NewSimpleClientset(), Netns: Netns(ns.Name()), NetConfPath: conf,
				Iface: IfaceOptions{Ifaces: []string{"eth0"}}, IPMasq: true, SubnetFile: filepath.Join(dir, "subnet.env"), Logger: testapi.Logger()}
			if c.mutate != nil {
				c.mutate(&o)
			}
			err := runDaemon(o)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %v, want an error saying %q", err, c.says)
			}
			if after := kernelSnapshot(t, ns); after != before {
				t.Fatalf("the node namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if _, err := os.Stat(o.SubnetFile); err == nil {
				t.Fatal("subnet.env written")
			}
		})
	}
}

// runDaemon is what `nodenet flanneld` does: New, then Run.
func runDaemon(o Options) error {
	d, err := New(o)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = d.Run(ctx)
	if err == nil {
		return context.Cause(ctx)
	}
	return err
}
