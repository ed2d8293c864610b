package cluster_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/cluster"
	"github.com/nodenet/nodenet/internal/cgroup2"
)

// TestUpEBPFDemo runs the demo's checks on a cluster whose proxies use
// the ebpf data plane (ClusterIP from every pod through each node's socket
// programs; NodePort on every node and the LoadBalancer IP through the
// receiving node's tc path), and checks the nodes' isolation on the shared
// kernel: each node's socket programs are attached to its own node cgroup
// only (none above it, so no node translates another's pods), each pinned
// in the node's own bpffs. Cleanup (upCluster's) checks down leaves no
// node cgroup and no mount.
func TestUpEBPFDemo(t *testing.T) {
	name, dir, bin := upCluster(t, "host-gw", "ebpf")
	out := runDemo(t, name, dir, bin, "(service) answered by echo-", "(NodePort on node-2) answered by echo-", "(LoadBalancer) answered by echo-")
	progs := map[ebpf.ProgramID]string{}
	for i := 1; i <= 3; i++ {
		node := cluster.NodeName(i)
		cg, err := cluster.NodeCgroup(name, i)
		if err != nil {
			t.Fatal(err)
		}
		ids := connect4(t, cg)
		if len(ids) != 1 {
			t.Fatalf("%s: %d connect4 programs on its cgroup %s, want 1", node, len(ids), cg)
		}
		if other, dup := progs[ids[0]]; dup {
			t.Errorf("%s and %s share connect4 program %d", other, node, ids[0])
		}
		progs[ids[0]] = node
		var fs unix.Statfs_t
		pins := filepath.Join(dir, "nodes", node, "sys/fs/bpf/nodenet/ipv4")
		if err := unix.Statfs(pins, &fs); err != nil || fs.Type != unix.BPF_FS_MAGIC {
			t.Errorf("%s: its pins %s are not on a bpffs (statfs type %#x, err %v)", node, pins, fs.Type, err)
		}
	}
	mnt, err := cgroup2.Mount()
	if err != nil {
		t.Fatal(err)
	}
	for _, above := range []string{filepath.Join(mnt, "nodenet.slice"), mnt} {
		if ids := connect4(t, above); len(ids) != 0 {
			t.Errorf("connect4 programs %v attached to %s, above the node cgroups: they would translate every node's pods", ids, above)
		}
	}
	t.Logf("demo:\n%s", out)
}

// connect4 lists the connect4 programs attached directly to cgroup dir.
func connect4(t *testing.T, dir string) []ebpf.ProgramID {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupInet4Connect})
	if err != nil {
		t.Fatalf("query connect4 programs of %s: %v", dir, err)
	}
	var ids []ebpf.ProgramID
	for _, p := range res.Programs {
		ids = append(ids, p.ID)
	}
	return ids
}
