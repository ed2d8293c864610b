package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/ipam/hostlocal"
	"github.com/nodenet/nodenet/subnetenv"
)

// TestLifecycleAllVersions runs ADD, CHECK, DEL (twice), GC and STATUS in
// every supported spec version against a dual-stack node, checking the
// result's shape for the version and the kernel state behind it.
func TestLifecycleAllVersions(t *testing.T) {
	for _, v := range allVersions {
		t.Run(v, func(t *testing.T) {
			n := newNode(t, false)
			pod := nettest.New(t)
			conf := n.conf(v, "")
			a := args(pod, "lifecycle-"+v, conf)
			res, err := n.add(a)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if res.CNIVersion != v {
				t.Fatalf("result version %s, want %s", res.CNIVersion, v)
			}
			checkShape(t, v, res)
			r := toCurrent(t, res)
			hostVeth := HostVethName(a.ContainerID, "eth0")
			if got := []string{r.Interfaces[0].Name, r.Interfaces[1].Name, r.Interfaces[2].Name}; !slices.Equal(got, []string{"cni0", hostVeth, "eth0"}) || r.Interfaces[2].Sandbox != pod.Path() {
				t.Fatalf("interfaces %v", r.Interfaces)
			}
			var ips []string
			for _, ip := range r.IPs {
				ips = append(ips, fmt.Sprintf("%s gw %s if %d", ip.Address.String(), ip.Gateway, *ip.Interface))
			}
			if want := []string{"10.244.1.2/24 gw 10.244.1.1 if 2", "fd00:10:244:1::2/64 gw fd00:10:244:1::1 if 2"}; !slices.Equal(ips, want) {
				t.Fatalf("ips %v, want %v", ips, want)
			}
			var routes []string
			for _, rt := range r.Routes {
				routes = append(routes, fmt.Sprintf("%s %s", rt.Dst.String(), rt.GW))
			}
			if want := []string{"10.244.0.0/16 <nil>", "fd00:10:244::/56 <nil>", "0.0.0.0/0 10.244.1.1", "::/0 fd00:10:244:1::1"}; !slices.Equal(routes, want) {
				t.Fatalf("routes %v, want %v", routes, want)
			}
			checkKernel(t, n, pod, hostVeth)

			if v != "0.3.1" { // CHECK exists from 0.4.0 on
				checkArgs := args(pod, a.ContainerID, withPrev(t, conf, res))
				if err := n.check(checkArgs); err != nil {
					t.Fatalf("CHECK after ADD: %v", err)
				}
				pod.MustExec(t, "ip", "addr", "del", "10.244.1.2/24", "dev", "eth0")
				pod.MustExec(t, "ip", "link", "set", "eth0", "mtu", "1400")
				err := n.check(checkArgs)
				for _, want := range []string{"address 10.244.1.2/24 missing on eth0", "MTU 1400, want 1450", "route 0.0.0.0/0 via 10.244.1.1 missing"} {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("CHECK of a broken pod: %v; want it to say %q", err, want)
					}
				}
			}

			if v == "1.1.0" {
				// GC (1.1) removes the attachment the runtime no longer
				// lists and keeps the valid one.
				pod2 := nettest.New(t)
				a2 := args(pod2, "lifecycle-gc", conf)
				n.mustAdd(a2)
				gcConf := withKey(t, conf, protocol.ValidAttachmentsKey, []map[string]string{{"containerID": a.ContainerID, "ifname": "eth0"}})
				if err := n.gc(args(nil, "", gcConf)); err != nil {
					t.Fatalf("GC: %v", err)
				}
				if _, err := n.host.Handle().LinkByName(HostVethName(a2.ContainerID, "eth0")); err == nil {
					t.Error("GC left the stale attachment's veth")
				}
				if _, err := n.host.Handle().LinkByName(hostVeth); err != nil {
					t.Errorf("GC removed the valid attachment's veth: %v", err)
				}
				if res := n.reservations("cbr0"); len(res) != 2 || res[0].ContainerID != a.ContainerID {
					t.Errorf("after GC: %v", res)
				}
				if err := n.status(args(nil, "", conf)); err != nil {
					t.Errorf("STATUS: %v", err)
				}
			}

			if err := n.del(a); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if err := n.del(a); err != nil {
				t.Fatalf("second DEL: %v", err)
			}
			n.assertClean(pod)
		})
	}
}

func TestVersionInfo(t *testing.T) {
	if got := protocol.SupportedVersions; !slices.Equal(got, allVersions) {
		t.Fatalf("supported versions %v, want %v", got, allVersions)
	}
}

// checkShape checks what differs between spec versions: 0.3.x/0.4.0 IPs
// carry "version", 1.1.0 interfaces carry "mtu", the others do not.
func checkShape(t *testing.T, v string, res *protocol.Result) {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var shape struct {
		CNIVersion string           `json:"cniVersion"`
		Interfaces []map[string]any `json:"interfaces"`
		IPs        []map[string]any `json:"ips"`
	}
	if err := json.Unmarshal(b, &shape); err != nil {
		t.Fatal(err)
	}
	if shape.CNIVersion != v || len(shape.Interfaces) != 3 || len(shape.IPs) != 2 {
		t.Fatalf("result %s", b)
	}
	_, hasIPVersion := shape.IPs[0]["version"]
	if hasIPVersion != (v == "0.3.1" || v == "0.4.0") {
		t.Errorf("%s: ips[].version present=%v: %s", v, hasIPVersion, b)
	}
	_, hasMTU := shape.Interfaces[2]["mtu"]
	if hasMTU != (v == "1.1.0") {
		t.Errorf("%s: interfaces[].mtu present=%v: %s", v, hasMTU, b)
	}
}

func checkKernel(t *testing.T, n *node, pod *nettest.NS, hostVeth string) {
	t.Helper()
	h := n.host.Handle()
	br, err := h.LinkByName("cni0")
	if err != nil || br.Type() != "bridge" || br.Attrs().MTU != 1450 || br.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("cni0: %v %+v", err, br)
	}
	if got := ipsOf(t, n.host, "cni0"); !slices.Equal(got, []string{"10.244.1.1/24", "fd00:10:244:1::1/64"}) {
		t.Errorf("cni0 addresses %v", got)
	}
	hv, err := h.LinkByName(hostVeth)
	if err != nil {
		t.Fatal(err)
	}
	if hv.Attrs().MasterIndex != br.Attrs().Index || hv.Attrs().MTU != 1450 || !strings.HasPrefix(hv.Attrs().Alias, "nodenet:cbr0:") {
		t.Errorf("host veth %+v", hv.Attrs())
	}
	if pi, err := h.LinkGetProtinfo(hv); err != nil || !pi.Hairpin || !pi.Learning {
		t.Errorf("host veth bridge port flags %v %v", pi, err)
	}
	// No polling for the port to forward: it must already do so.
	if state := strings.TrimSpace(string(n.host.MustExec(t, "cat", "/sys/class/net/"+hostVeth+"/brport/state"))); state != "3" {
		t.Errorf("bridge port state %s, want 3 (forwarding)", state)
	}
	eth0, err := pod.Handle().LinkByName("eth0")
	if err != nil || eth0.Attrs().MTU != 1450 || eth0.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("pod eth0: %v %+v", err, eth0)
	}
	if got := ipsOf(t, pod, "eth0"); !slices.Equal(got, []string{"10.244.1.2/24", "fd00:10:244:1::2/64"}) {
		t.Errorf("pod addresses %v", got)
	}
	// Our addresses are never tentative, and DAD is off for the rest (the
	// link-local one still shows "tentative" until the kernel's addrconf
	// work item runs, which is quick but asynchronous).
	if out := string(pod.MustExec(t, "ip", "-6", "addr", "show", "dev", "eth0", "scope", "global")); strings.Contains(out, "tentative") {
		t.Errorf("pod IPv6 address is tentative:\n%s", out)
	}
	if out := strings.TrimSpace(string(pod.MustExec(t, "cat", "/proc/sys/net/ipv6/conf/eth0/accept_dad"))); out != "0" {
		t.Errorf("pod eth0 accept_dad = %s, want 0", out)
	}
	routes := string(pod.MustExec(t, "ip", "route")) + string(pod.MustExec(t, "ip", "-6", "route"))
	for _, want := range []string{"default via 10.244.1.1 dev eth0", "10.244.0.0/16 via 10.244.1.1 dev eth0", "default via fd00:10:244:1::1 dev eth0", "fd00:10:244::/56 via fd00:10:244:1::1 dev eth0"} {
		if !strings.Contains(routes, want) {
			t.Errorf("pod routes lack %q:\n%s", want, routes)
		}
	}
	if lo, err := pod.Handle().LinkByName("lo"); err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("pod lo not up: %v", err)
	}
}

// TestTwoPodsPing: two pods on one bridge reach each other and the gateway
// over IPv4 and IPv6 right after ADD returns.
func TestTwoPodsPing(t *testing.T) {
	n := newNode(t, false)
	p1, p2 := nettest.New(t), nettest.New(t)
	conf := n.conf("1.1.0", "")
	r1 := n.mustAdd(args(p1, "ping-1", conf))
	r2 := n.mustAdd(args(p2, "ping-2", conf))
	ip1, ip2 := podIPs(t, r1), podIPs(t, r2)
	for _, tc := range []struct {
		from *nettest.NS
		to   string
	}{
		{p1, ip2[0]}, {p2, ip1[0]}, {p1, "10.244.1.1"},
		{p1, ip2[1]}, {p2, ip1[1]}, {p2, "fd00:10:244:1::1"},
	} {
		ping(t, tc.from, tc.to)
	}
	for _, a := range []string{"ping-1", "ping-2"} {
		pod := p1
		if a == "ping-2" {
			pod = p2
		}
		if err := n.del(args(pod, a, conf)); err != nil {
			t.Fatal(err)
		}
	}
	n.assertClean(p1, p2)
}

// TestDelIdempotent: DEL succeeds when nothing was added, when the netns
// is gone or not given, and when the bridge does not exist.
func TestDelIdempotent(t *testing.T) {
	n := newNode(t, true)
	conf := n.conf("1.0.0", "")
	if err := n.del(args(nil, "never-added", conf)); err != nil {
		t.Fatalf("DEL of nothing: %v", err)
	}
	a := args(nil, "gone-netns", conf)
	a.Netns = "/run/netns/nnt-does-not-exist"
	if err := n.del(a); err != nil {
		t.Fatalf("DEL with vanished netns: %v", err)
	}
	// The pod's namespace disappears before DEL (node reboot, runtime
	// crash): the veth went with it, DEL still frees the address.
	pod := nettest.New(t)
	n.mustAdd(args(pod, "ns-first", conf))
	n.host.MustExec(t, "ip", "link", "del", HostVethName("ns-first", "eth0"))
	gone := args(nil, "ns-first", conf)
	gone.Netns = "/run/netns/nnt-does-not-exist"
	if err := n.del(gone); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	// DEL needs no subnet.env (flanneld may be gone for good).
	n.mustAdd(args(pod, "no-env", conf))
	if err := os.Remove(n.subnetFile); err != nil {
		t.Fatal(err)
	}
	if err := n.del(args(pod, "no-env", conf)); err != nil {
		t.Fatalf("DEL without subnet.env: %v", err)
	}
	n.assertClean(pod)
}

// TestGCAfterCrashedAdd: an ADD stopped after reserving its address and
// creating its veth (the state a kill -9 there leaves; the binary-level
// test really kills it) is cleaned up by GC, and the live pod is intact.
func TestGCAfterCrashedAdd(t *testing.T) {
	n := newNode(t, true)
	conf := n.conf("1.1.0", "")
	live := nettest.New(t)
	liveRes, err := n.add(args(live, "live", conf))
	if err != nil {
		t.Fatal(err)
	}

	held, release := make(chan struct{}), make(chan struct{})
	n.plugin.AfterReserve = func() {
		close(held)
		<-release
		panic("crash")
	}
	finished := make(chan any)
	crashed := nettest.New(t)
	go func() {
		defer func() { finished <- recover() }()
		n.add(args(crashed, "crashed", conf))
	}()
	<-held
	n.plugin.AfterReserve = nil
	if _, err := n.host.Handle().LinkByName(HostVethName("crashed", "eth0")); err != nil {
		t.Fatalf("the held ADD has no veth: %v", err)
	}
	if len(n.reservations("cbr0")) != 2 {
		t.Fatalf("the held ADD has no reservation: %v", n.reservations("cbr0"))
	}
	gcConf := withKey(t, conf, protocol.ValidAttachmentsKey, []map[string]string{{"containerID": "live", "ifname": "eth0"}})
	if err := n.gc(args(nil, "", gcConf)); err != nil {
		t.Fatal(err)
	}
	if res := n.reservations("cbr0"); len(res) != 1 || res[0].ContainerID != "live" {
		t.Fatalf("after GC: %v", res)
	}
	if got := links(t, n.host); !slices.Equal(got, []string{"cni0", HostVethName("live", "eth0")}) {
		t.Fatalf("after GC host links %v", got)
	}
	if err := n.check(args(live, "live", withPrev(t, conf, liveRes))); err != nil {
		t.Fatalf("live pod broken by GC: %v", err)
	}
	close(release)
	if p := <-finished; p != "crash" {
		t.Fatalf("held ADD ended with %v", p)
	}
}

// TestGCSparesOtherNetworksAndForeignVeths: GC only touches its network.
func TestGCSparesOtherNetworksAndForeignVeths(t *testing.T) {
	n := newNode(t, true)
	pod := nettest.New(t)
	other := withKey(t, n.conf("1.1.0", ""), "name", "other")
	n.mustAdd(args(pod, "other-net", other))
	nettest.Link(t, n.host, "vethforeign", "", pod, "foreign0", "")
	if err := n.gc(args(nil, "", n.conf("1.1.0", ""))); err != nil {
		t.Fatal(err)
	}
	if got := links(t, n.host); !slices.Equal(got, []string{"cni0", HostVethName("other-net", "eth0"), "vethforeign"}) {
		t.Fatalf("GC of cbr0 touched other links: %v", got)
	}
	if res := n.reservations("other"); len(res) != 1 {
		t.Fatalf("GC of cbr0 released network other's address: %v", res)
	}
}

// TestAddWithPrevResult: a plugin earlier in the chain reported an
// interface; ours are appended and indexed after it.
func TestAddWithPrevResult(t *testing.T) {
	n := newNode(t, true)
	pod := nettest.New(t)
	prev := map[string]any{"cniVersion": "1.0.0", "interfaces": []map[string]any{{"name": "lo", "sandbox": pod.Path()}}}
	conf := withKey(t, n.conf("1.0.0", ""), "prevResult", prev)
	r := n.mustAdd(args(pod, "chained", conf))
	if len(r.Interfaces) != 4 || r.Interfaces[0].Name != "lo" || r.Interfaces[3].Name != "eth0" || *r.IPs[0].Interface != 3 {
		t.Fatalf("chained result %+v %+v", r.Interfaces, r.IPs[0])
	}
	if err := n.del(args(pod, "chained", conf)); err != nil {
		t.Fatal(err)
	}
}

// TestRequestedIPAndRanges: CNI_ARGS IP=, args.cni.ips, runtimeConfig.ips
// and a ranges override.
func TestRequestedIPAndRanges(t *testing.T) {
	n := newNode(t, true)
	conf := n.conf("1.0.0", `"ranges":[[{"subnet":"10.244.1.0/24","rangeStart":"10.244.1.100","rangeEnd":"10.244.1.200"}]]`)
	for i, tc := range []struct {
		cniArgs string
		conf    []byte
		want    string
	}{
		{"IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.244.1.150", conf, "10.244.1.150"},
		{"", withKey(t, conf, "args", map[string]any{"cni": map[string]any{"ips": []string{"10.244.1.151/24"}}}), "10.244.1.151"},
		{"", withKey(t, conf, "runtimeConfig", map[string]any{"ips": []string{"10.244.1.152"}}), "10.244.1.152"},
		{"", conf, "10.244.1.153"}, // round-robin continues after the last reservation
	} {
		pod := nettest.New(t)
		a := args(pod, fmt.Sprintf("req-%d", i), tc.conf)
		a.Args = tc.cniArgs
		r := n.mustAdd(a)
		if got := podIPs(t, r); got[0] != tc.want {
			t.Errorf("case %d: got %v, want %s", i, got, tc.want)
		}
	}
}

// TestIPMasq: ipMasq installs one masquerade chain per network in the
// node's namespace — never in the root namespace.
func TestIPMasq(t *testing.T) {
	nettest.RequireTool(t, "iptables")
	n := newNode(t, true)
	conf := n.conf("1.0.0", `"ipMasq":true`)
	for i := range 2 {
		n.mustAdd(args(nettest.New(t), fmt.Sprintf("masq-%d", i), conf))
	}
	chain := masqChain("cbr0")
	rules := string(n.host.MustExec(t, "iptables-save", "-t", "nat"))
	for _, want := range []string{
		"-A POSTROUTING -s 10.244.1.0/24 -m comment --comment \"nodenet-cni cbr0\" -j " + chain,
		"-A " + chain + " -d 10.244.1.0/24 -j RETURN",
		"-A " + chain + " ! -d 224.0.0.0/4 -j MASQUERADE",
	} {
		if strings.Count(rules, want) != 1 {
			t.Errorf("want exactly one %q in:\n%s", want, rules)
		}
	}
}

// TestStatus: 50 until subnet.env exists, and while the bridge is in the
// way; ready otherwise.
func TestStatus(t *testing.T) {
	n := newNode(t, true)
	conf := n.conf("1.1.0", "")
	if err := n.status(args(nil, "", conf)); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	missing := withKey(t, conf, "subnetFile", filepath.Join(n.dir, "nope.env"))
	wantCode(t, n.status(args(nil, "", missing)), 50, "nope.env")
	if err := os.WriteFile(n.subnetFile, []byte("FLANNEL_MTU=1450\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, n.status(args(nil, "", conf)), 50, "FLANNEL_IPMASQ")
	n.writeEnv(mustEnv(t, "10.244.0.0/16", "10.244.1.0/24"))
	n.host.MustExec(t, "ip", "link", "add", "cni0", "type", "bridge")
	n.host.MustExec(t, "ip", "addr", "add", "10.244.9.1/24", "dev", "cni0")
	wantCode(t, n.status(args(nil, "", conf)), 50, "10.244.9.1/24")
	if err := n.status(args(nil, "", withKey(t, conf, "forceAddress", true))); err != nil {
		t.Errorf("STATUS with forceAddress: %v", err)
	}
	n.host.MustExec(t, "ip", "link", "del", "cni0")
	n.host.MustExec(t, "ip", "link", "add", "cni0", "type", "veth", "peer", "name", "cni0p")
	wantCode(t, n.status(args(nil, "", conf)), 50, "not a bridge")
}

// TestForceAddress: a cni0 left with another subnet's gateway is an error
// naming both, unless forceAddress, which replaces it.
func TestForceAddress(t *testing.T) {
	n := newNode(t, true)
	pod := nettest.New(t)
	n.host.MustExec(t, "ip", "link", "add", "cni0", "type", "bridge")
	n.host.MustExec(t, "ip", "addr", "add", "10.244.9.1/24", "dev", "cni0")
	conf := n.conf("1.0.0", "")
	_, err := n.add(args(pod, "force", conf))
	if err == nil || !strings.Contains(err.Error(), "10.244.9.1/24") || !strings.Contains(err.Error(), "forceAddress") {
		t.Fatalf("ADD onto a cni0 with another address: %v", err)
	}
	n.assertClean(pod)
	forced := withKey(t, conf, "forceAddress", true)
	n.mustAdd(args(pod, "force", forced))
	if got := ipsOf(t, n.host, "cni0"); !slices.Equal(got, []string{"10.244.1.1/24"}) {
		t.Fatalf("cni0 after forceAddress: %v", got)
	}
}

// TestAddFailuresLeaveNothing: every failing ADD returns the right code and
// a message naming the problem, and leaves no veth, address or cache.
func TestAddFailuresLeaveNothing(t *testing.T) {
	n := newNode(t, true)
	conf := n.conf("1.0.0", "")
	pod := nettest.New(t)
	for _, tc := range []struct {
		name  string
		setup func(a *protocol.CmdArgs)
		code  uint
		msg   []string
	}{
		{"pod already has eth0", func(a *protocol.CmdArgs) { pod.MustExec(t, "ip", "link", "add", "eth0", "type", "bridge") }, protocol.CodeInternal, []string{"eth0"}},
		{"requested address outside ranges", func(a *protocol.CmdArgs) { a.Args = "IP=10.9.9.9" }, protocol.CodeInvalidConfig, []string{"10.9.9.9"}},
		{"requested gateway", func(a *protocol.CmdArgs) { a.Args = "IP=10.244.1.1" }, protocol.CodeInvalidConfig, []string{"gateway"}},
		{"bad CNI_ARGS", func(a *protocol.CmdArgs) { a.Args = "IP=banana" }, protocol.CodeBadEnv, []string{"banana"}},
		{"malformed CNI_ARGS", func(a *protocol.CmdArgs) { a.Args = "garbage" }, protocol.CodeBadEnv, []string{"garbage"}},
		{"missing netns", func(a *protocol.CmdArgs) { a.Netns = "/run/netns/nnt-nope" }, protocol.CodeBadEnv, []string{"nnt-nope"}},
		{"empty netns", func(a *protocol.CmdArgs) { a.Netns = "" }, protocol.CodeBadEnv, []string{"CNI_NETNS"}},
		{"no subnet.env", func(a *protocol.CmdArgs) { a.StdinData = withKey(t, conf, "subnetFile", "/nonexistent/subnet.env") }, protocol.CodeTryAgainLater, []string{"/nonexistent/subnet.env"}},
		{"malformed subnet.env", func(a *protocol.CmdArgs) {
			bad := filepath.Join(n.dir, "bad.env")
			os.WriteFile(bad, []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=big\nFLANNEL_IPMASQ=true\n"), 0o644)
			a.StdinData = withKey(t, conf, "subnetFile", bad)
		}, protocol.CodeTryAgainLater, []string{"bad.env", "FLANNEL_MTU"}},
		{"exhausted range", func(a *protocol.CmdArgs) {
			a.StdinData = withKey(t, conf, "ranges", [][]map[string]string{{{"subnet": "10.244.1.0/24", "rangeStart": "10.244.1.2", "rangeEnd": "10.244.1.2"}}})
			s, _ := hostlocal.Open(n.dataDir, "cbr0")
			os.WriteFile(filepath.Join(s.Dir(), "10.244.1.2"), []byte("someone\r\neth0"), 0o600)
			s.Close()
		}, protocol.CodeTryAgainLater, []string{"no free address"}},
		{"bad JSON", func(a *protocol.CmdArgs) { a.StdinData = []byte(`{"cniVersion":`) }, protocol.CodeDecode, nil},
		{"unknown type", func(a *protocol.CmdArgs) { a.StdinData = withKey(t, conf, "type", "bridge") }, protocol.CodeInvalidConfig, []string{`"bridge"`}},
		{"bad bridge name", func(a *protocol.CmdArgs) { a.StdinData = withKey(t, conf, "bridge", "this-name-is-far-too-long") }, protocol.CodeInvalidConfig, []string{"this-name-is-far-too-long"}},
		{"bad mtu", func(a *protocol.CmdArgs) { a.StdinData = withKey(t, conf, "mtu", 10) }, protocol.CodeInvalidConfig, []string{"mtu"}},
		{"bad ranges", func(a *protocol.CmdArgs) {
			a.StdinData = withKey(t, conf, "ranges", [][]map[string]string{{{"subnet": "10.244.1.7/24"}}})
		}, protocol.CodeInvalidConfig, []string{"host bits"}},
		{"missing name", func(a *protocol.CmdArgs) { a.StdinData = withKey(t, conf, "name", "") }, protocol.CodeInvalidConfig, []string{"name"}},
		{"flannel delegate with ipam", func(a *protocol.CmdArgs) { a.StdinData = n.flannelConf("1.0.0", `{"ipam":{}}`) }, protocol.CodeInvalidConfig, []string{"ipam"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := args(pod, "fail", conf)
			tc.setup(a)
			_, err := n.add(a)
			wantCode(t, err, tc.code, tc.msg...)
			pod.Exec(t.Context(), "ip", "link", "del", "eth0") // the pre-existing one, if any
			os.RemoveAll(filepath.Join(n.dataDir, "cbr0", "10.244.1.2"))
			n.assertClean(pod)
		})
	}
}

func mustEnv(t *testing.T, network, subnet string) subnetenv.Env {
	t.Helper()
	return subnetenv.FromSubnets(netip.MustParsePrefix(network), netip.MustParsePrefix(subnet), netip.Prefix{}, netip.Prefix{}, 1450, true)
}

// TestDelWithReaper: with a Reaper, DEL cuts the pod off (pod end down
// and renamed, so its name is free; host end doomed; address released) and
// leaves the slow unregistering to ReapDoomed, which GC also runs. A
// failing Reaper makes DEL delete the pair itself.
func TestDelWithReaper(t *testing.T) {
	n := newNode(t, true)
	pod := nettest.New(t)
	conf := n.conf("1.0.0", "")
	calls := 0
	n.plugin.Reaper = func() error { calls++; return nil }
	first := args(pod, "reaped-1", conf)
	n.mustAdd(first)
	if err := n.del(first); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || len(n.reservations("cbr0")) != 0 {
		t.Fatalf("reaper calls %d, reservations %v", calls, n.reservations("cbr0"))
	}
	podLinks := links(t, pod)
	if len(podLinks) != 1 || !strings.HasPrefix(podLinks[0], "nndead") {
		t.Fatalf("pod links after DEL: %v", podLinks)
	}
	if l, _ := pod.Handle().LinkByName(podLinks[0]); l.Attrs().OperState == netlink.OperUp {
		t.Error("the cut-off pod end is still connected")
	}
	hv, err := n.host.Handle().LinkByName(HostVethName("reaped-1", "eth0"))
	if err != nil || hv.Attrs().Group != doomedGroup || hv.Attrs().Flags&net.FlagUp != 0 {
		t.Fatalf("host end after DEL: %v %+v", err, hv)
	}
	// The same interface name is free for the next pod in the namespace.
	second := args(pod, "reaped-2", conf)
	n.mustAdd(second)
	if err := n.host.Do(ReapDoomed); err != nil {
		t.Fatal(err)
	}
	if got := links(t, n.host); !slices.Equal(got, []string{"cni0", HostVethName("reaped-2", "eth0")}) {
		t.Fatalf("host links after reaping: %v", got)
	}
	if got := links(t, pod); !slices.Equal(got, []string{"eth0"}) {
		t.Fatalf("pod links after reaping: %v", got)
	}
	// GC reaps too (a reaper that never ran).
	if err := n.del(second); err != nil {
		t.Fatal(err)
	}
	if err := n.gc(args(nil, "", withKey(t, n.conf("1.1.0", ""), protocol.ValidAttachmentsKey, []any{}))); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
	// A reaper that cannot start: DEL deletes the pair itself.
	n.plugin.Reaper = func() error { return errors.New("no reaper") }
	third := args(pod, "reaped-3", conf)
	n.mustAdd(third)
	if err := n.del(third); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
}

// TestDelTwiceWithReaper: a repeated DEL leaves a doomed pair to the
// reaper instead of paying for its deletion.
func TestDelTwiceWithReaper(t *testing.T) {
	n := newNode(t, true)
	pod := nettest.New(t)
	calls := 0
	n.plugin.Reaper = func() error { calls++; return nil }
	a := args(pod, "twice", n.conf("1.0.0", ""))
	n.mustAdd(a)
	for range 2 {
		if err := n.del(a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.host.Handle().LinkByName(HostVethName("twice", "eth0")); err != nil || calls != 2 {
		t.Fatalf("second DEL deleted the doomed pair itself (%v) or skipped the reaper (%d calls)", err, calls)
	}
	n.plugin.Reaper = nil
	if err := n.del(a); err != nil {
		t.Fatal(err)
	}
	n.assertClean()
}

// TestLogFile: with "logFile" the plugin also logs there (stdout stays the
// result's).
func TestLogFile(t *testing.T) {
	n := newNode(t, true)
	pod := nettest.New(t)
	logFile := filepath.Join(n.dir, "cni.log")
	conf := withKey(t, n.conf("1.0.0", ""), "logFile", logFile)
	n.mustAdd(args(pod, "logged", conf))
	if err := n.del(args(pod, "logged", conf)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(b), "msg=ADD") || !strings.Contains(string(b), "container=logged") || !strings.Contains(string(b), "msg=DEL") {
		t.Fatalf("log file: %q %v", b, err)
	}
}
