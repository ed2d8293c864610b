package main

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// The ebpf proxy mode needs two things of a node (proxy/ebpf Preflight):
// a cgroup v2 hierarchy, at whose root the proxy attaches its socket
// programs (the DaemonSet hands it the node's /sys/fs/cgroup; on a hybrid
// layout it uses unified/), and a bpf file system at /sys/fs/bpf for its
// pins. A third condition is the machine's, not the proxy's: a kind node
// shares the host's kernel, so its cgroup v2 root must be a cgroup of its
// own, or attaching there would translate the connections of every
// process on the machine — the other nodes' and the host's.
//
// ebpfPaths are the paths whose file system types (`stat -f -c %T`, "-"
// for a missing path) ebpfBlocker judges, in this order.
var ebpfPaths = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/bpf"}

// ebpfBlocker says why the ebpf mode cannot run on a node whose file
// system types are types (ebpfPaths' order) and whose processes sit in
// the host's cgroup v2 hierarchy at hostV2 (the "0::" line of the node's
// /proc/<pid>/cgroup on the host; "" if it has none), or "" when it can.
// The reasons are spelled out: the usual cause is the host, not the
// cluster.
func ebpfBlocker(node string, types []string, hostV2 string) string {
	if len(types) != len(ebpfPaths) {
		return fmt.Sprintf("node %s: could not read the file system types of %s (got %q)", node, strings.Join(ebpfPaths, ", "), types)
	}
	var why []string
	switch {
	case types[0] != "cgroup2fs" && types[1] != "cgroup2fs":
		why = append(why, fmt.Sprintf("no cgroup v2 hierarchy in the node (/sys/fs/cgroup is %s, /sys/fs/cgroup/unified is %s): "+
			"the proxy attaches its socket programs to a cgroup v2 cgroup", types[0], types[1]))
	case hostV2 == "/" || hostV2 == "":
		why = append(why, fmt.Sprintf("the node's cgroup v2 root is the machine's root cgroup (the node's processes are in %q of the host's "+
			"cgroup v2 hierarchy: on a cgroup v1 or hybrid host Docker makes no v2 cgroup for a container), so the proxy, which "+
			"attaches at its cgroup root on a node, would translate the connections of every process on the machine, "+
			"the other nodes' and the host's. Needs a cgroup v2 host, where each node is a cgroup of its own", hostV2))
	}
	if types[2] != "bpf_fs" {
		why = append(why, fmt.Sprintf("/sys/fs/bpf is %s, not a bpf file system (the proxy pins its maps and links there)", types[2]))
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("node %s: %s", node, strings.Join(why, "; "))
}

// cgroupV2Path is the path in the "0::" line of a /proc/<pid>/cgroup.
func cgroupV2Path(procCgroup string) string {
	for _, line := range strings.Split(procCgroup, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
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
		pid, err := d.run(ctx, "inspect", "-f", "{{.State.Pid}}", node)
		if err != nil {
			return "", err
		}
		cg, err := os.ReadFile("/proc/" + pid + "/cgroup")
		if err != nil {
			return "", fmt.Errorf("node %s's cgroups on the host: %w", node, err)
		}
		if why := ebpfBlocker(node, strings.Fields(out), cgroupV2Path(string(cg))); why != "" {
			return why, nil
		}
	}
	return "", nil
}
