package cni

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/ipam/hostlocal"
	"github.com/nodenet/nodenet/subnetenv"
)

func TestMain(m *testing.M) {
	os.Exit(nettest.CheckNoLeaks(m))
}

var allVersions = []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// node is a throwaway "node": a host namespace the plugin runs in, a
// subnet.env and state directories in a temp dir.
type node struct {
	t          *testing.T
	host       *nettest.NS
	dir        string
	subnetFile string
	dataDir    string
	cacheDir   string
	plugin     *Plugin
}

// dual-stack unless v4only
func newNode(t *testing.T, v4only bool) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{
		t: t, host: nettest.New(t), dir: dir,
		subnetFile: filepath.Join(dir, "run", "flannel", "subnet.env"),
		dataDir:    filepath.Join(dir, "networks"),
		cacheDir:   filepath.Join(dir, "flannel"),
		plugin:     &Plugin{},
	}
	env := subnetenv.FromSubnets(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.0/24"),
		netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("fd00:10:244:1::/64"), 1450, true)
	if v4only {
		env.IPv6Network, env.IPv6Subnet = netip.Prefix{}, netip.Prefix{}
	}
	n.writeEnv(env)
	return n
}

func (n *node) writeEnv(env subnetenv.Env) {
	n.t.Helper()
	if err := subnetenv.Write(n.subnetFile, env); err != nil {
		n.t.Fatal(err)
	}
}

// conf renders a "nodenet" config; extra is spliced in as more JSON keys.
func (n *node) conf(version, extra string) []byte {
	s := fmt.Sprintf(`{"cniVersion":%q,"name":"cbr0","type":"nodenet","subnetFile":%q,"dataDir":%q`, version, n.subnetFile, n.dataDir)
	if extra != "" {
		s += "," + extra
	}
	return []byte(s + "}")
}

// flannelConf renders an upstream-style 10-flannel.conflist entry.
func (n *node) flannelConf(version, delegate string) []byte {
	return fmt.Appendf(nil, `{"cniVersion":%q,"name":"cbr0","type":"flannel","subnetFile":%q,"dataDir":%q,"delegate":%s}`,
		version, n.subnetFile, n.cacheDir, delegate)
}

func args(pod *nettest.NS, id string, conf []byte) *protocol.CmdArgs {
	a := &protocol.CmdArgs{ContainerID: id, IfName: "eth0", StdinData: conf, Path: "/usr/lib/cni"}
	if pod != nil {
		a.Netns = pod.Path()
	}
	return a
}

// The plugin's host side is the calling thread's namespace, so every call
// runs on a thread inside the node's host namespace.

func (n *node) add(a *protocol.CmdArgs) (*protocol.Result, error) {
	var res *protocol.Result
	err := n.host.Do(func() (err error) {
		res, err = n.plugin.Add(context.Background(), a)
		return err
	})
	return res, err
}

func (n *node) mustAdd(a *protocol.CmdArgs) *current.Result {
	n.t.Helper()
	res, err := n.add(a)
	if err != nil {
		n.t.Fatalf("ADD %s: %v", a.ContainerID, err)
	}
	return toCurrent(n.t, res)
}

// toCurrent reads our result back with the reference library's decoder for
// its version and converts it to the library's newest result type: what a
// runtime sees.
func toCurrent(t *testing.T, res *protocol.Result) *current.Result {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	lib, err := version.NewResult(res.CNIVersion, b)
	if err != nil {
		t.Fatalf("reference decoder rejects %s: %v", b, err)
	}
	r, err := current.NewResultFromResult(lib)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (n *node) do(fn func(context.Context, *protocol.CmdArgs) error, a *protocol.CmdArgs) error {
	return n.host.Do(func() error { return fn(context.Background(), a) })
}

func (n *node) del(a *protocol.CmdArgs) error   { return n.do(n.plugin.Del, a) }
func (n *node) check(a *protocol.CmdArgs) error { return n.do(n.plugin.Check, a) }
func (n *node) gc(a *protocol.CmdArgs) error    { return n.do(n.plugin.GC, a) }
func (n *node) status(a *protocol.CmdArgs) error {
	return n.do(n.plugin.Status, a)
}

// withPrev adds a prevResult (as CHECK gets it) to a config.
func withPrev(t *testing.T, conf []byte, res any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var prev map[string]any
	if err := json.Unmarshal(b, &prev); err != nil {
		t.Fatal(err)
	}
	m["prevResult"] = prev
	out, _ := json.Marshal(m)
	return out
}

// withKey sets one top-level key of a config.
func withKey(t *testing.T, conf []byte, key string, val any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = val
	out, _ := json.Marshal(m)
	return out
}

// links lists the links of a namespace by name (lo excluded).
func links(t *testing.T, ns *nettest.NS) []string {
	t.Helper()
	ls, err := ns.Handle().LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		if l.Attrs().Name != "lo" {
			out = append(out, l.Attrs().Name)
		}
	}
	slices.Sort(out)
	return out
}

func (n *node) reservations(network string) []hostlocal.Reservation {
	n.t.Helper()
	if _, err := os.Stat(filepath.Join(n.dataDir, network)); os.IsNotExist(err) {
		return nil
	}
	s, err := hostlocal.Open(n.dataDir, network)
	if err != nil {
		n.t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Reservations()
	if err != nil {
		n.t.Fatal(err)
	}
	return res
}

// assertClean: no veth on the host, nothing but lo in the pods, no
// reservation, no delegate cache.
func (n *node) assertClean(pods ...*nettest.NS) {
	n.t.Helper()
	for _, l := range links(n.t, n.host) {
		if l != "cni0" {
			n.t.Errorf("host namespace still has %s (links %v)", l, links(n.t, n.host))
		}
	}
	for _, p := range pods {
		if l := links(n.t, p); len(l) != 0 {
			n.t.Errorf("pod namespace %s still has %v", p.Name(), l)
		}
	}
	if r := n.reservations("cbr0"); len(r) != 0 {
		n.t.Errorf("reservations left: %v", r)
	}
	if entries, _ := os.ReadDir(n.cacheDir); len(entries) != 0 {
		n.t.Errorf("delegate cache entries left: %v", entries)
	}
}

func podIPs(t *testing.T, r *current.Result) []string {
	t.Helper()
	var out []string
	for _, ip := range r.IPs {
		out = append(out, ip.Address.IP.String())
	}
	return out
}

func ipsOf(t *testing.T, ns *nettest.NS, ifName string) []string {
	t.Helper()
	l, err := ns.Handle().LinkByName(ifName)
	if err != nil {
		t.Fatalf("%s in %s: %v", ifName, ns.Name(), err)
	}
	addrs, err := ns.Handle().AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			out = append(out, a.IPNet.String())
		}
	}
	slices.Sort(out)
	return out
}

func wantCode(t *testing.T, err error, code uint, msgParts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got success, want error code %d", code)
	}
	te := protocol.AsWireError(err)
	if te.Code != code {
		t.Fatalf("got code %d (%v), want %d", te.Code, err, code)
	}
	for _, m := range msgParts {
		if !strings.Contains(te.Msg, m) {
			t.Errorf("message %q does not mention %q", te.Msg, m)
		}
	}
}

// ping sends one ICMP echo request from inside ns and waits for the reply,
// like `ping -c1 -W2`, without depending on a ping binary.
func ping(t *testing.T, from *nettest.NS, dst string) {
	t.Helper()
	ip := netip.MustParseAddr(dst)
	err := from.Do(func() error {
		network, typ, reply := "ip4:icmp", byte(8), byte(0)
		if ip.Is6() {
			network, typ, reply = "ip6:58", 128, 129
		}
		c, err := net.ListenPacket(network, "")
		if err != nil {
			return err
		}
		defer c.Close()
		var id [2]byte
		rand.Read(id[:])
		msg := []byte{typ, 0, 0, 0, id[0], id[1], 0, 1, 'n', 'n'}
		if ip.Is4() { // the kernel checksums ICMPv6 itself
			var sum uint32
			for i := 0; i < len(msg); i += 2 {
				sum += uint32(msg[i])<<8 | uint32(msg[i+1])
			}
			sum = sum>>16 + sum&0xffff
			sum += sum >> 16
			msg[2], msg[3] = byte(^sum>>8), byte(^sum)
		}
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: ip.AsSlice()}); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 1500)
		for {
			n, src, err := c.ReadFrom(buf)
			if err != nil {
				return fmt.Errorf("no echo reply: %w", err)
			}
			if n >= 8 && buf[0] == reply && buf[4] == id[0] && buf[5] == id[1] && src.(*net.IPAddr).IP.Equal(ip.AsSlice()) {
				return nil
			}
		}
	})
	if err != nil {
		t.Fatalf("ping %s from %s: %v", dst, from.Name(), err)
	}
}
