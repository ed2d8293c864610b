package ebpf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	pt "github.com/nodenet/nodenet/proxy/proxytest"
)

func TestCheckCgroupRefusesRootsAndNonCgroups(t *testing.T) {
	for dir, want := range map[string]string{
		"":                "no cgroup",
		t.TempDir():       "not a cgroup v2 directory",
		"/does/not/exist": "statfs",
	} {
		if err := checkCgroup(dir, false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkCgroup(%q) = %v, want an error about %q", dir, err, want)
		}
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			continue
		}
		if err := checkCgroup(root, false); err != nil && !strings.Contains(err.Error(), "not a child cgroup") && !strings.Contains(err.Error(), "not a cgroup v2") {
			t.Errorf("checkCgroup(%s) = %v", root, err)
		} else if err == nil {
			t.Errorf("checkCgroup accepted the root cgroup %s", root)
		}
	}
}

// attached counts the programs attached to cgroup as family f's hooks.
func attached(t *testing.T, cgroup string, f proxy.Family) int {
	t.Helper()
	cg, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	n := 0
	for _, h := range hooks[f] {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: h.attach})
		if err != nil {
			t.Fatal(err)
		}
		n += len(res.Programs)
	}
	return n
}

// TestIntegrityRepair: pins removed behind the data plane's back (which
// detaches the links) are noticed by Intact, and the core's repair sync
// attaches and pins again, with the service table intact.
func TestIntegrityRepair(t *testing.T) {
	nettest.RequirePrivileged(t)
	// The node namespace holds one address besides the loopback: the
	// dump lists it for wildcard NodePorts.
	node := nettest.New(t)
	node.MustExec(t, "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	node.MustExec(t, "ip", "addr", "add", "192.0.2.50/24", "dev", "d0")
	cfg := Config{Family: proxy.IPv4, Cgroup: nettest.Cgroup(t), PinDir: filepath.Join(nettest.BPFFS(t), "ipv4"), Log: testapi.Logger(),
		NetNS: node.Path()}
	ctx := context.Background()
	dp := New(cfg)
	t.Cleanup(func() { _ = New(cfg).Cleanup(ctx) })
	snap := pt.Snapshot(proxy.IPv4, pt.Port("ns", "web", "10.96.0.10", 80, proxy.TCP, pt.WithEndpoints(8080, "10.244.1.2")))
	if _, err := dp.Sync(ctx, snap, pt.Full); err != nil {
		t.Fatal(err)
	}
	if ok, err := dp.Intact(ctx); !ok || err != nil {
		t.Fatalf("fresh data plane: intact %v, %v", ok, err)
	}
	if n := attached(t, cfg.Cgroup, proxy.IPv4); n != len(hooks[proxy.IPv4]) {
		t.Fatalf("%d programs attached, want %d", n, len(hooks[proxy.IPv4]))
	}
	for _, h := range hooks[proxy.IPv4] {
		if err := os.Remove(dp.linkPin(h.prog)); err != nil {
			t.Fatal(err)
		}
	}
	// Unlinking the last reference detaches from a work queue: soon,
	// not at once.
	pt.Eventually(t, 2*time.Second, "links detached with their pins gone", func() error {
		if n := attached(t, cfg.Cgroup, proxy.IPv4); n != 0 {
			return fmt.Errorf("%d programs attached", n)
		}
		return nil
	})
	if ok, err := dp.Intact(ctx); ok || err != nil {
		t.Fatalf("after the pins went: intact %v, %v", ok, err)
	}
	if _, err := dp.Sync(ctx, snap, pt.Full); err != nil {
		t.Fatal(err)
	}
	if n := attached(t, cfg.Cgroup, proxy.IPv4); n != len(hooks[proxy.IPv4]) {
		t.Fatalf("after repair %d programs attached, want %d", n, len(hooks[proxy.IPv4]))
	}
	got, err := dp.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if want := "tcp 10.96.0.10:80 -> 10.244.1.2:8080\nlocal addresses (NodePorts on *): 192.0.2.50"; got != want {
		t.Errorf("after repair the maps hold %q, want %q", got, want)
	}
}

// TestLoadRefusesAPinDirOutsideBPFFS: pins on a plain filesystem would not
// survive anything; the error says what to mount.
func TestLoadRefusesAPinDirOutsideBPFFS(t *testing.T) {
	nettest.RequirePrivileged(t)
	dp := New(Config{Family: proxy.IPv4, Cgroup: nettest.Cgroup(t), PinDir: t.TempDir()})
	_, err := dp.Sync(context.Background(), pt.Snapshot(proxy.IPv4), pt.Full)
	if err == nil || !strings.Contains(err.Error(), "not on a bpf filesystem") {
		t.Fatalf("sync with pins on tmpfs: %v", err)
	}
}
