// Package ebpf is nodenet's eBPF data plane, first milestone: socket-level
// load balancing. It implements proxy.DataPlane for one IP family with BPF
// programs on cgroup socket hooks (bpf/socklb.c, compiled by bpf2go; the
// generated socklb_bpfel.go/.o are committed, so building needs no clang).
//
// # Why socket-level
//
// A socket in the attached cgroup that connects (TCP, connected UDP) or
// sends (unconnected UDP) to a service entry point has its destination
// rewritten to one backend inside the syscall, before a packet exists. The
// connection then runs pod to pod: no DNAT, no conntrack entry, no
// per-packet rule walk, and the cost of a lookup does not grow with the
// number of services (one hash lookup, then one array-like lookup).
//
// # Programs (per family: *4 for IPv4, *6 for IPv6)
//
//	connect4/6      translate ClusterIP:port (also externalIPs, LB IPs,
//	                NodePort on the node's addresses) to a random backend,
//	                or the client's sticky one (sessionAffinity ClientIP);
//	                no endpoints → the syscall fails with ECONNREFUSED
//	                (bpf_set_retval before rejecting; a bare reject would
//	                be EPERM)
//	sendmsg4/6      the same per datagram for unconnected UDP
//	recvmsg4/6      a datagram from a translated backend reads as coming
//	                from the service address (DNS clients check that)
//	getpeername4/6  a translated socket's peer is the service address
//
// Loops: none; a choice is prandom % count.
//
// # Maps (one set per family, pinned)
//
//	services   hash {addr, port, proto} → {id, count, flags, affinity s}
//	backends   hash {id, slot} → {addr, port}; slots 0..count-1
//	reverse    LRU {socket cookie, backend} → service address (recvmsg,
//	           getpeername)
//	affinity   LRU {netns cookie, id} → {last use, slot, backend}
//
// Affinity is keyed by network namespace, not client IP: at connect time a
// socket has no source address yet, and a pod is one namespace (host
// processes share the node's). The entry remembers the slot and the
// backend and is used only while that slot still holds that backend.
//
// # Syncs are map updates
//
// Programs are loaded once per process; Sync writes maps only. Each entry
// point has a stable id. A changed endpoint set keeps every surviving
// backend in its slot (assignSlots): newcomers fill removed backends'
// slots, the last backend moves into a leftover hole, the count is raised
// after new slots exist and lowered before the tail is deleted, so a
// concurrent connect always finds a backend. One endpoint removed is ~2-3
// map operations. A full sync reads both maps back first and rewrites only
// what differs, so it converges on whatever the kernel holds (a restart,
// a failed sync) and writes nothing when nothing changed. Entry points a
// full sync creates go in two batch updates (backends, then services). A
// services map that is full skips the entry point with a log line (E2BIG),
// not the sync.
//
// # Pins, restart, cleanup
//
// Maps and links are pinned under Config.PinDir (default
// /sys/fs/bpf/nodenet/ipv4|ipv6; it must be on a bpf filesystem). The
// first Sync of a new process re-opens the pinned maps and points the
// pinned links at its freshly loaded programs (link update: the links are
// never detached), so a restart keeps translating without a gap. Cleanup
// unpins the links (which detaches them), removes the map pins and the
// directory, from any process. The cgroup is the caller's (Config.Cgroup);
// a hierarchy's root cgroup is refused.
//
// # Tests
//
// kernel_test.go runs proxytest's topology (API server, proxy core, client
// and pod namespaces) with the programs on a throwaway cgroup holding the
// test process: ClusterIP over IPv4, IPv6 and dual-stack, a pod through its
// own service, getpeername, unconnected UDP replies from the VIP,
// ECONNREFUSED without endpoints (TCP connect and UDP sendto), affinity,
// endpoint removal, a restart under connect load (no failed connect, the
// same links) and Cleanup (no pin, nothing attached). proxytest.KernelSuite
// itself also passes its ClusterIP, refusal, affinity, hairpin, dual-stack,
// bad-input and restart cases against this package, but fails
// RemovedUDPEndpointGetsNoMoreDatagrams (a connected UDP socket keeps its
// backend) and Metrics (which kube-proxy metrics an "ebpf" mode serves is
// decided with the mode's registration); its NodePort and eTP Local cases
// pass only because the client's sockets are in the cgroup, so they prove
// nothing about external traffic. It is therefore not wired in yet.
//
// # Not yet (next milestones of issue 14)
//
// Traffic that does not start in the cgroup (NodePort/externalIPs/LB from
// other hosts, hairpin through the node) needs tc/TCX programs with
// DNAT/SNAT and a conntrack map; until then `--proxy-mode ebpf` stays
// refused by `nodenet proxy`. Also to come: connected UDP sockets moving
// off a removed backend (socket destroy; today they keep their backend),
// IPv4-mapped IPv6 destinations on IPv6 sockets,
// loadBalancerSourceRanges, metrics on map occupancy and a --dump flag
// (DataPlane.Dump exists), and restricting translation to one node's pods
// when several nodes share a kernel.
package ebpf
