package iptables

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestKernel runs the shared real-kernel suite (ClusterIP, NodePort,
// refusal, affinity, eTP Local + health check, UDP conntrack cleanup,
// hairpin over IPv4 and IPv6; bad input, restart) with iptables-nft and
// iptables-legacy, one data plane per family.
func TestKernel(t *testing.T) {
	nettest.RequirePrivileged(t)
	for _, b := range []ipt.Backend{ipt.NFT, ipt.Legacy} {
		t.Run(string(b), func(t *testing.T) {
			proxytest.KernelSuite(t, func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
				return New(f, kernelRunner(node, f, b), testapi.Logger())
			})
		})
	}
}

// iptablesMode is one iptables backend for SwitchSuite.
func iptablesMode(b ipt.Backend) proxytest.Mode {
	return proxytest.Mode{
		Name: "iptables-" + string(b),
		New: func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
			return New(f, kernelRunner(node, f, b), testapi.Logger())
		},
		Leftovers: func(t testing.TB, node *nettest.NS) string {
			var left []string
			r := kernelRunner(node, proxy.IPv4, b)
			for _, table := range []string{"nat", "filter"} {
				out, err := r.Save(t.Context(), table)
				if err != nil {
					t.Fatalf("save: %v", err)
				}
				for _, l := range strings.Split(string(out), "\n") {
					if strings.Contains(l, Prefix) {
						left = append(left, l)
					}
				}
			}
			return strings.Join(left, "\n")
		},
	}
}

// TestKernelSwitchBackends switches iptables-nft ↔ iptables-legacy: the
// same mechanism `nodenet proxy` uses between modes (the lead wires the
// iptables ↔ nftables pair in proxy/app once nftables lands).
func TestKernelSwitchBackends(t *testing.T) {
	nettest.RequirePrivileged(t)
	proxytest.SwitchSuite(t, iptablesMode(ipt.NFT), iptablesMode(ipt.Legacy))
}

// TestKernelLeavesOtherDaemonsChains: flanneld's masquerade chain
// (NODENET-FLANNEL-MASQ, hooked from POSTROUTING) shares the proxy's
// "NODENET-" prefix; neither a full sync nor a clean-up may touch it.
func TestKernelLeavesOtherDaemonsChains(t *testing.T) {
	nettest.RequirePrivileged(t)
	node := nettest.New(t)
	r := kernelRunner(node, proxy.IPv4, ipt.NFT)
	foreign := "*nat\n:NODENET-FLANNEL-MASQ - [0:0]\n-A NODENET-FLANNEL-MASQ -s 10.244.0.0/16 ! -d 10.244.0.0/16 -j MASQUERADE\n-A POSTROUTING -j NODENET-FLANNEL-MASQ\nCOMMIT\n"
	if err := r.Restore(t.Context(), []byte(foreign)); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		out, err := r.Save(t.Context(), "nat")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"-A NODENET-FLANNEL-MASQ -s 10.244.0.0/16", "-A POSTROUTING -j NODENET-FLANNEL-MASQ"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("%s: %q is gone:\n%s", when, want, out)
			}
		}
	}
	dp := New(proxy.IPv4, r, testapi.Logger())
	if _, err := dp.Sync(t.Context(), proxytest.Snapshot(proxy.IPv4, proxytest.GoldenServices(proxy.IPv4)...), proxytest.Full); err != nil {
		t.Fatal(err)
	}
	check("after a full sync")
	if err := dp.Cleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	check("after the proxy's clean-up")
	out, _ := r.Save(t.Context(), "nat")
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, ":") && Owns(strings.Fields(l[1:])[0]) {
			t.Errorf("clean-up left the proxy's chain %s", l)
		}
	}
}

// TestKernelRepairUnpoisonsClientTuples: while nat NODENET-SERVICES is
// flushed by hand, a client's SYN to a ClusterIP leaves the node
// untranslated and conntrack records the flow so (SYN_SENT, 120 s, renewed
// by each SYN). The repair puts the rules back, but NAT is decided on a
// flow's first packet only: the client's next connection from the same
// source port would match that entry and leave untranslated again. The
// chaos suite saw bursts of ClusterIP timeouts for minutes after its flush
// fault, whenever the client's ephemeral ports came round. The repair (a
// full sync) deletes such flows, so the same 5-tuple connects.
func TestKernelRepairUnpoisonsClientTuples(t *testing.T) {
	nettest.RequirePrivileged(t)
	e := proxytest.NewEnv(t, func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
		return New(f, kernelRunner(node, f, ipt.NFT), testapi.Logger())
	})
	p := e.StartProxy(t)
	svc := e.CreateService(t, proxytest.Service("repair", v1.ProtocolTCP, proxytest.TCPPort))
	e.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1)
	vip := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(proxytest.TCPPort))
	proxytest.Eventually(t, 10*time.Second, "service answers", func() error {
		_, err := proxytest.DialTCP(e.Client, vip, time.Second)
		return err
	})
	dial := fixedPortDialer(e, vip, 41234)
	e.Node.MustExec(t, "iptables-nft", "-t", "nat", "-F", chainServices)
	if err := dial(500 * time.Millisecond); err == nil {
		t.Fatal("connected through a flushed NODENET-SERVICES")
	}
	flows := string(e.Node.MustExec(t, "conntrack", "-L", "-p", "tcp", "--sport", "41234"))
	if !strings.Contains(flows, "SYN_SENT") || !strings.Contains(flows, "src="+svc.Spec.ClusterIP) {
		t.Fatalf("no untranslated SYN_SENT flow to the VIP after the flushed dial:\n%s", flows)
	}
	// What the integrity check triggers on finding the chain flushed.
	if err := p.SyncNow(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if err := dial(2 * time.Second); err != nil {
		t.Fatalf("same 5-tuple after the repair: %v\nflows:\n%s", err, e.Node.MustExec(t, "conntrack", "-L", "-p", "tcp", "--sport", "41234"))
	}
}

// fixedPortDialer dials vip from the client with one fixed source port, as
// a client whose ephemeral ports come round.
func fixedPortDialer(e *proxytest.Env, vip string, port int) func(time.Duration) error {
	from := &net.TCPAddr{IP: net.ParseIP(proxytest.ClientIP), Port: port}
	return func(timeout time.Duration) error {
		return e.Client.Do(func() error {
			d := net.Dialer{LocalAddr: from, Timeout: timeout}
			c, err := d.Dial("tcp", vip)
			if err != nil {
				return err
			}
			return c.Close()
		})
	}
}

// TestKernelEndpointsUnpoisonClientTuples: a TCP service without endpoints
// is refused in filter FORWARD, but an ACCEPT ahead of the proxy's jump
// there (flanneld's, when it inserted its own after the proxy's; a host
// firewall's) lets a client's SYN leave the node untranslated, and
// conntrack keeps that flow (SYN_SENT, 120 s, renewed by each SYN). Once
// the service has endpoints, the same 5-tuple must reach them: the sync
// that programs the first endpoints deletes the untranslated flows. The
// chaos suite saw bursts of ClusterIP timeouts up to two minutes after its
// load started, whenever a client's ephemeral ports came round to a port
// it had used before the proxy programmed the Service's endpoints.
func TestKernelEndpointsUnpoisonClientTuples(t *testing.T) {
	nettest.RequirePrivileged(t)
	e := proxytest.NewEnv(t, func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
		return New(f, kernelRunner(node, f, ipt.NFT), testapi.Logger())
	})
	e.StartProxy(t)
	svc := e.CreateService(t, proxytest.Service("late", v1.ProtocolTCP, proxytest.TCPPort))
	proxytest.Eventually(t, 10*time.Second, "the service's reject is programmed", func() error {
		if out := e.Node.MustExec(t, "iptables-nft-save", "-t", "filter"); !strings.Contains(string(out), svc.Spec.ClusterIP) {
			return errors.New("no rule for " + svc.Spec.ClusterIP)
		}
		return nil
	})
	e.Node.MustExec(t, "iptables-nft", "-I", "FORWARD", "-s", proxytest.ClientIP, "-j", "ACCEPT")
	vip := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(proxytest.TCPPort))
	dial := fixedPortDialer(e, vip, 41235)
	err := dial(500 * time.Millisecond)
	if err == nil {
		t.Fatal("connected to a service without endpoints")
	}
	flows := string(e.Node.MustExec(t, "conntrack", "-L", "-p", "tcp", "--sport", "41235"))
	if !strings.Contains(flows, "SYN_SENT") || !strings.Contains(flows, "src="+svc.Spec.ClusterIP) {
		t.Fatalf("no untranslated SYN_SENT flow to the VIP past the accept (dial: %v):\n%s", err, flows)
	}
	e.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1)
	proxytest.Eventually(t, 10*time.Second, "service answers", func() error {
		_, err := proxytest.DialTCP(e.Client, vip, time.Second)
		return err
	})
	if err := dial(2 * time.Second); err != nil {
		t.Fatalf("same 5-tuple once the service has endpoints: %v\nflows:\n%s", err, e.Node.MustExec(t, "conntrack", "-L", "-p", "tcp", "--sport", "41235"))
	}
}

// TestKernelRepairOnDeletion: with iptables-nft, the proxy's services
// chain flushed by hand, then the whole nat table, is noticed from the
// kernel's nf_tables announcements and repaired within a second or so,
// with no periodic check running; the proxy's own syncs force no repair.
func TestKernelRepairOnDeletion(t *testing.T) {
	nettest.RequirePrivileged(t)
	proxytest.RepairSuite(t, func(t testing.TB, node *nettest.NS, f proxy.Family) proxy.DataPlane {
		p := New(f, kernelRunner(node, f, ipt.NFT), testapi.Logger())
		p.SetNetns(node.Name())
		return p
	},
		proxytest.Damage{Name: "iptables-nft -t nat -F " + chainServices, Do: func(t testing.TB, node *nettest.NS) {
			node.MustExec(t, "iptables-nft", "-t", "nat", "-F", chainServices)
		}},
		proxytest.Damage{Name: "iptables-nft -t nat -F", Do: func(t testing.TB, node *nettest.NS) {
			node.MustExec(t, "iptables-nft", "-t", "nat", "-F")
		}},
	)
}

// TestWatchChangesLegacy: iptables-legacy announces nothing; the core
// must be told so (and keep its periodic check) rather than wait for
// events that never come.
func TestWatchChangesLegacy(t *testing.T) {
	p := New(proxy.IPv4, ipt.New(nil, ipt.IPv4, ipt.Legacy), testapi.Logger())
	if err := p.WatchChanges(t.Context(), func() {}); !errors.Is(err, proxy.ErrNoChangeEvents) {
		t.Fatalf("WatchChanges with iptables-legacy = %v; want ErrNoChangeEvents", err)
	}
	f := New(proxy.IPv4, ipt.NewFake(), testapi.Logger())
	if err := f.WatchChanges(t.Context(), func() {}); !errors.Is(err, proxy.ErrNoChangeEvents) {
		t.Fatalf("WatchChanges with a fake runner = %v; want ErrNoChangeEvents", err)
	}
}
