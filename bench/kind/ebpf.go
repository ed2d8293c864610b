package main

import (
	"context"
	"fmt"
	"strings"
)

// The ebpf proxy mode needs two things of a node (proxy/ebpf Preflight):
// a cgroup v2 hierarchy, whose cgroup its socket programs attach to, and
// a bpf file system at /sys/fs/bpf for its pins. The DaemonSet hands the
// proxy the node's /sys/fs/cgroup and /sys/fs/bpf through hostPaths.
//
// nodeFS is what `stat -f -c %T` says of the paths ebpfPaths names, in
// that order, on one node ("-" for a path that does not exist).
var ebpfPaths = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/bpf"}

// ebpfBlocker says why the ebpf mode cannot run on a node whose file
// system types are types (ebpfPaths' order), or "" when it can. The
// reason is spelled out because the usual cause is the host, not the
// cluster: a kind node's cgroups are the machine's.
func ebpfBlocker(node string, types []string) string {
	if len(types) != len(ebpfPaths) {
		return fmt.Sprintf("node %s: could not read the file system types of %s (got %q)", node, strings.Join(ebpfPaths, ", "), types)
	}
	var why []string
	if types[0] != "cgroup2fs" && types[1] != "cgroup2fs" {
		why = append(why, fmt.Sprintf("no cgroup v2 hierarchy (/sys/fs/cgroup is %s, /sys/fs/cgroup/unified is %s): "+
			"the proxy attaches its socket programs to a cgroup v2 cgroup. The host boots with cgroup v1 only; "+
			"a node could mount cgroup2 itself, but on a v1 host every process of the machine sits in that "+
			"hierarchy's root (Docker makes no v2 cgroups), so a node's proxy would attach at the machine's "+
			"root cgroup and translate the other nodes' and the host's connections too. Needs a cgroup v2 "+
			"(or hybrid) host", types[0], types[1]))
	}
	if types[2] != "bpf_fs" {
		why = append(why, fmt.Sprintf("/sys/fs/bpf is %s, not a bpf file system (the proxy pins its maps and links there)", types[2]))
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("node %s: %s", node, strings.Join(why, "; "))
}

// ebpfCheck asks every node whether the ebpf mode can run there and
// returns the first reason it cannot ("" when every node can).
func (k *kcluster) ebpfCheck(ctx context.Context) (string, error) {
	d := docker{bin: "docker"}
	for _, node := range []string{cpNode, workerNode, worker2Node} {
		// One line per path; a missing path prints "-" rather than
		// failing the whole command.
		script := ""
		for _, p := range ebpfPaths {
			script += fmt.Sprintf("stat -f -c %%T %s 2>/dev/null || echo -; ", p)
		}
		out, err := d.run(ctx, "exec", node, "sh", "-c", script)
		if err != nil {
			return "", fmt.Errorf("inspect %s for the ebpf mode: %w", node, err)
		}
		if why := ebpfBlocker(node, strings.Fields(out)); why != "" {
			return why, nil
		}
	}
	return "", nil
}
