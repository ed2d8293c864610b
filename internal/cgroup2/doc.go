// Package cgroup2 finds the cgroup v2 hierarchy and manages nodenet's own
// child cgroups in it: the ebpf proxy attaches its socket programs to one,
// and in the local cluster each node's agent puts its pods into its own
// (<mount>/nodenet.slice/<cluster>-<node>), so one node's proxy never
// translates another node's sockets on the shared kernel.
//
// The mount is read from /proc/self/mountinfo, not assumed: a unified host
// has it at /sys/fs/cgroup, a hybrid one (v1 controllers beside v2) at
// /sys/fs/cgroup/unified, containers elsewhere.
package cgroup2
