package cni

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/cni/protocol"
	"github.com/nodenet/nodenet/internal/nettest"
)

// upstreamDelegate is the delegate upstream flannel renders for a
// dual-stack subnet.env with FLANNEL_IPMASQ=true and the stock
// 10-flannel.conflist delegate, plus our test dataDir.
func upstreamDelegate(n *node, version string) string {
	return fmt.Sprintf(`{"cniVersion":%q,"hairpinMode":true,"ipMasq":false,"ipam":{"dataDir":%q,"ranges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:10:244:1::/64"}]],"routes":[{"dst":"10.244.0.0/16"},{"dst":"fd00:10:244::/56"}],"type":"host-local"},"isDefaultGateway":true,"isGateway":true,"mtu":1450,"name":"cbr0","type":"bridge"}`, version, n.dataDir)
}

func (n *node) stockFlannel(version string) []byte {
	// Upstream reads a top-level "ipam" and merges it into the delegate's;
	// the tests use it to keep host-local's dataDir in a temp dir.
	return withKey(n.t, n.flannelConf(version, `{"hairpinMode":true,"isDefaultGateway":true}`), "ipam", map[string]any{"dataDir": n.dataDir})
}

// TestFlannelConfig: a stock flannel config works, caches the delegate
// byte-for-byte as upstream flannel does, and DEL uses that cache even
// after subnet.env is gone.
func TestFlannelConfig(t *testing.T) {
	for _, v := range []string{"0.3.1", "1.0.0"} {
		t.Run(v, func(t *testing.T) {
			n := newNode(t, false)
			pod := nettest.New(t)
			conf := n.stockFlannel(v)
			a := args(pod, "flannel-"+v, conf)
			r := n.mustAdd(a)
			if got := podIPs(t, r); !slices.Equal(got, []string{"10.244.1.2", "fd00:10:244:1::2"}) {
				t.Fatalf("ips %v", got)
			}
			cached, err := os.ReadFile(filepath.Join(n.cacheDir, a.ContainerID))
			if err != nil {
				t.Fatal(err)
			}
			if want := upstreamDelegate(n, v); string(cached) != want {
				t.Fatalf("delegate cache\n got %s\nwant %s", cached, want)
			}
			checkKernel(t, n, pod, HostVethName(a.ContainerID, "eth0"))
			if v != "0.3.1" {
				if err := n.check(args(pod, a.ContainerID, withPrev(t, conf, r))); err != nil {
					t.Fatalf("CHECK: %v", err)
				}
			}
			os.Remove(n.subnetFile)
			if err := n.del(a); err != nil {
				t.Fatalf("DEL without subnet.env: %v", err)
			}
			if err := n.del(a); err != nil {
				t.Fatalf("second DEL: %v", err)
			}
			n.assertClean(pod)
		})
	}
}

// TestFlannelTakesOverUpstreamPod: a pod set up by upstream flannel +
// bridge + host-local before the binary was replaced (random veth name,
// host-local reservation, upstream's delegate cache) is torn down by our
// DEL.
func TestFlannelTakesOverUpstreamPod(t *testing.T) {
	nettest.RequireSysfs(t, "/usr/lib/cni/bridge")
	n := newNode(t, false)
	pod := nettest.New(t)
	const id = "upstream-pod"
	delegate := upstreamDelegate(n, "1.0.0")
	// What upstream's ADD does: cache the delegate, exec bridge (which
	// execs host-local).
	if err := os.MkdirAll(n.cacheDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.cacheDir, id), []byte(delegate), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.host.Do(func() error {
		cmd := exec.Command("/usr/lib/cni/bridge")
		cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + id, "CNI_NETNS=" + pod.Path(), "CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni"}
		cmd.Stdin = strings.NewReader(delegate)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("bridge ADD: %v\n%s", err, out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if res := n.reservations("cbr0"); len(res) != 2 {
		t.Fatalf("upstream ADD reserved %v", res)
	}
	// Not our pair: DEL deletes it itself rather than leaving it to a
	// reaper that only knows our host ends.
	n.plugin.Reaper = func() error { t.Error("a foreign pair went to the reaper"); return nil }
	if err := n.del(args(pod, id, n.stockFlannel("1.0.0"))); err != nil {
		t.Fatalf("DEL of an upstream pod: %v", err)
	}
	n.assertClean(pod)
}

// TestFlannelExecDelegate: a delegate other than bridge runs as its own
// binary, and DEL finds it through the cache.
func TestFlannelExecDelegate(t *testing.T) {
	nettest.RequireSysfs(t, "/usr/lib/cni/ptp")
	n := newNode(t, true)
	pod := nettest.New(t)
	conf := withKey(t, n.flannelConf("1.0.0", `{"type":"ptp"}`), "ipam", map[string]any{"dataDir": n.dataDir})
	a := args(pod, "ptp-pod", conf)
	r := n.mustAdd(a)
	if got := podIPs(t, r); !slices.Equal(got, []string{"10.244.1.2"}) {
		t.Fatalf("ptp delegate ips %v", got)
	}
	var cached map[string]any
	b, _ := os.ReadFile(filepath.Join(n.cacheDir, "ptp-pod"))
	if json.Unmarshal(b, &cached) != nil || cached["type"] != "ptp" {
		t.Fatalf("cache %s", b)
	}
	if err := n.del(a); err != nil {
		t.Fatal(err)
	}
	n.assertClean(pod)
}

// TestFlannelGC: GC removes stale delegate cache entries of its network
// only, with their addresses and veths.
func TestFlannelGC(t *testing.T) {
	n := newNode(t, true)
	conf := n.stockFlannel("1.1.0")
	p1, p2 := nettest.New(t), nettest.New(t)
	n.mustAdd(args(p1, "keep", conf))
	n.mustAdd(args(p2, "drop", conf))
	if err := os.WriteFile(filepath.Join(n.cacheDir, "other-net"), []byte(`{"name":"other","type":"bridge"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	gcConf := withKey(t, conf, protocol.ValidAttachmentsKey, []map[string]string{{"containerID": "keep", "ifname": "eth0"}})
	if err := n.gc(args(nil, "", gcConf)); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(n.cacheDir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"keep", "other-net"}) {
		t.Fatalf("cache after GC: %v", names)
	}
	if got := links(t, n.host); !slices.Equal(got, []string{"cni0", HostVethName("keep", "eth0")}) {
		t.Fatalf("links after GC: %v", got)
	}
	if res := n.reservations("cbr0"); len(res) != 1 || res[0].ContainerID != "keep" {
		t.Fatalf("reservations after GC: %v", res)
	}
}

// TestFlannelIPMasq: without flanneld masquerading (FLANNEL_IPMASQ=false)
// the delegate masquerades, as upstream's bridge would.
func TestFlannelIPMasq(t *testing.T) {
	nettest.RequireTool(t, "iptables")
	n := newNode(t, true)
	env := mustEnv(t, "10.244.0.0/16", "10.244.1.0/24")
	env.IPMasq = false
	n.writeEnv(env)
	n.mustAdd(args(nettest.New(t), "masq", n.stockFlannel("1.0.0")))
	if rules := string(n.host.MustExec(t, "iptables-save", "-t", "nat")); !strings.Contains(rules, masqChain("cbr0")+" ! -d 224.0.0.0/4 -j MASQUERADE") {
		t.Fatalf("no masquerading:\n%s", rules)
	}
}
