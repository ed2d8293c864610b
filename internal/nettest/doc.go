// Package nettest gives kernel-touching tests throwaway network namespaces
// and honest privilege gates.
//
// Tests for the CNI plugin, flannel backends and the kube-proxy peer have to
// create links, addresses, routes and nftables rules, and they must never do
// that in the host's root namespace. New creates a namespace that is named
// like `ip netns add` would name it (so it can be inspected with ordinary
// tools while a test is paused) and is torn down by t.Cleanup even when the
// test fails. Link wires two namespaces together with a veth pair so
// multi-node data paths can be exercised with real traffic.
// ForwardLoopback lets a program inside a namespace reach a test API server
// on the root namespace's loopback at the same address, and StartProcess
// runs such a program (an upstream daemon) with its log kept and its process
// group stopped at cleanup.
//
// The gates (RequirePrivileged, RequireTool, RequireSysfs) skip on a
// developer laptop but fail when NODENET_PRIVILEGED=1 is set, which CI does
// for the privileged tier: a tier that can pass by skipping everything tests
// nothing.
//
// Creating, switching into and removing namespaces is internal/netnsutil's
// job, so tests exercise the same code the daemons run: NS.Do runs fn on a
// dedicated goroutine locked to its thread, and if the thread cannot be
// moved back it is retired instead of being handed, in a foreign
// namespace, to unrelated goroutines.
//
// Cgroup and BPFFS give eBPF tests a throwaway cgroup v2 child holding the
// test process (programs attach there, never to a root cgroup) and a
// private bpf filesystem for pins; both go at cleanup.
//
// Use CheckNoLeaks from TestMain to catch namespaces that outlive a test
// binary.
package nettest
