// Package ebpf is nodenet's eBPF data plane: socket-level load balancing,
// and a tc path for traffic from outside the node (see "Traffic from
// outside the node"). It implements proxy.DataPlane for one IP family with
// BPF programs on cgroup socket hooks (bpf/socklb.c) and on TCX ingress
// (bpf/tcnat.c), compiled by bpf2go; the generated *_bpfel.go/.o are
// committed, so building needs no clang.
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
//	                NodePorts: see "Wildcard NodePorts") to a random backend,
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
//	services     hash {addr, port, proto, scope} → {id, count, flags,
//	             affinity s}; scope bits: SCOPE_INSIDE, SCOPE_WILDCARD
//	backends     hash {id, slot} → {addr, port}; slots 0..count-1
//	local_addrs  hash {addr} → 1: the node namespace's addresses, where
//	             wildcard NodePorts answer
//	reverse      LRU {socket cookie, backend} → service address (recvmsg,
//	             getpeername)
//	affinity     LRU {netns cookie, id} → {last use, slot, backend}
//
// Affinity is keyed by network namespace, not client IP: at connect time a
// socket has no source address yet, and a pod is one namespace (host
// processes share the node's). The entry remembers the slot and the
// backend and is used only while that slot still holds that backend.
//
// # externalTrafficPolicy Local from inside the cluster (kubernetes#71596)
//
// An eTP=Local external entry point (externalIP, LB IP, NodePort) holds
// the node's local endpoints, for clients from outside. Traffic from inside
// the cluster goes to the cluster-wide endpoints in the other modes
// (iptables' -s clusterCIDR jump, the node's own connects), so such an
// entry point (with internalTrafficPolicy Cluster) gets a second services
// entry, scope SCOPE_INSIDE (scopeInside), with the internal endpoints,
// and the ordinary one carries SVC_INSIDE (flagInside). Every socket the
// socket programs see is this node's, a pod's or the host's: for a
// flagged entry they take the inside entry, so a pod or the node on a
// node without local endpoints reaches a remote one instead of being
// refused. Unflagged entries cost no second lookup. The tc path takes the
// inside entry for sources in the cluster CIDRs (src_ranges id 0,
// clusterCIDRsID, written by full syncs): pods of a node whose own proxy
// did not translate them, or pods behind a tc-attached veth. Both keep the
// pod's address (no SNAT), as the other modes do. --dump shows the inside
// entry as "<addr:port> (inside) -> ...".
//
// # Wildcard NodePorts (localaddrs.go)
//
// Without --nodeport-addresses (NodePorts.All) a NodePort answers on every
// local address of the node's namespace, as iptables' `addrtype
// --dst-type LOCAL` and nftables' `fib daddr type local`: a second NIC, an
// address added later. Each such NodePort is one services entry with the
// zero address and scope SCOPE_WILDCARD (scopeWildcard); both the socket
// programs and the tc program look it up (find_svc in bpf/lbmaps.h) only
// after the exact lookup missed and the destination is in local_addrs.
// The wildcard is a scope bit, not just the zero address, so a connect()
// to 0.0.0.0 (which Linux takes for "this host") never hits it by its
// exact lookup. local_addrs holds the addresses of the family in
// Config.NetNS (the node's namespace; "" is the process's), the loopback
// excepted (127.0.0.0/8, ::1: the nftables mode's `daddr !=
// 127.0.0.0/8`, so NodePorts on localhost need --nodeport-addresses
// there too). The data plane lists them at load and at every full sync and
// follows an address subscription (netlink RTM_NEWADDR/RTM_DELADDR) in
// between, relisting after each burst of messages: an address added or
// removed takes effect within milliseconds (bench/README.md: a median
// of 1 ms from `ip addr add` to a served NodePort), with no sync
// and no write to services: one address is one map write. With
// --nodeport-addresses each NodePort is one exact entry per listed address
// and there is no wildcard. --dump prints wildcard entries as "*:port" and
// the map as a last line, "local addresses (NodePorts on *): ...". A UDP
// backend leaving a wildcard NodePort dooms {zero address, port, backend};
// the socket iterator falls back to that key when the socket's exact
// service address is not doomed.
//
// # Syncs are map updates
//
// Programs are loaded once per process, by Prepare (proxy.Preparer: the
// core runs it while the informers make their initial lists, so at 10,000
// Services the first sync does not also pay for the ELF parse, kernel BTF,
// map creation and the verifier) or else by the first Sync; Sync writes
// maps only, and the first one after a load is always full. Each entry
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
// /sys/fs/bpf/nodenet/ipv4|ipv6; it must be on a bpf filesystem). The load
// of a new process (Prepare or its first Sync) re-opens the pinned maps and
// points the pinned links at its freshly loaded programs (link update: the
// links are never detached), so a restart keeps translating without a gap.
// Cleanup unpins the links (which detaches them), removes the map pins and
// the directory, from any process. The cgroup is the caller's
// (Config.Cgroup); a hierarchy's root cgroup is refused unless
// Config.RootCgroupOK (`nodenet proxy` on a real node attaches at the root,
// as Cilium does; tests and the local cluster never do).
//
// # nodenet proxy --proxy-mode ebpf
//
// --bpf-pin-dir (default /sys/fs/bpf/nodenet; ipv4/ and ipv6/ below it),
// --cgroup-path (default: the cgroup v2 mount, found in mountinfo; a
// hybrid host's /sys/fs/cgroup resolves to its unified/), --dump (prints
// the pinned tables, DumpPinned, and exits). Preflight fails the start
// with one error when bpffs or the cgroup is missing; a verifier
// rejection names the program and carries the log's last lines
// (loadError). Starting another mode or --cleanup removes this mode's
// pins and links, and starting ebpf removes the others' rules (app.Modes).
//
// # Connected UDP
//
// A connected UDP socket keeps the backend its connect chose: no later
// syscall passes a destination a hook could rewrite. When a sync takes a
// backend away from a UDP entry point, the data plane closes those sockets
// (udpdestroy.go, bpf/sockdestroy.c): a UDP socket iterator, run in every
// network namespace whose sockets can be translated (the named ones and
// those of the attached cgroup's processes' threads), destroys each
// connected socket whose peer is the removed backend and whose reverse
// entry shows it got there through that service (bpf_sock_destroy; Linux
// ≥ 6.5 and kernel BTF, checked when the programs load). The application's
// next send or receive fails (ECONNABORTED), as a resolver then
// reconnects; sockets that talk to a pod directly are left alone. Chosen
// over SOCK_DESTROY through sock_diag, which is also per namespace but
// needs each socket's 4-tuple, so every UDP socket would first be dumped
// to user space: the iterator matches in the kernel against the reverse
// map the programs already keep.
//
// # Metrics
//
// Besides the metrics every mode serves (kube-proxy's names, only those
// kube-proxy registers in every mode, as it has no ebpf mode), the data
// plane is a prometheus.Collector the core registers:
// nodenet_proxy_ebpf_map_entries{map} and _map_max_entries{map} per
// ip_family, and nodenet_proxy_ebpf_skipped_entries_total{reason}
// (map_full, conflict) for entry points a sync could not program, and
// nodenet_proxy_ebpf_tc_interface_changes_total{change} (see "Choosing the
// tc interfaces").
//
// # Tests
//
// suite_test.go runs proxytest.KernelSuite case for case with the other
// modes, on a throwaway cgroup holding the test process and a throwaway
// bpffs. The cases named in waitingForTC (NodePort and eTP Local from the
// client namespace, which stands for another host) skip (every other case,
// ExternalTrafficPolicyLocalFromInside included, passes): the client's
// sockets are the test process's, in the cgroup, so socket LB would answer
// them and prove nothing about traffic from outside the node, which the
// tc path serves. kernel_test.go adds the socket-LB specifics: getpeername,
// unconnected UDP replies from the VIP, ECONNREFUSED for TCP connect and
// UDP sendto, endpoint removal, a restart under connect load (no failed
// connect, the same links) and Cleanup (no pin, nothing attached).
// cmd/nodenet's TestProxyModeSwitchEBPF switches iptables ↔ ebpf and
// nftables ↔ ebpf.
//
// # Traffic from outside the node (tc path)
//
// Packets that did not start in the cgroup — NodePort on the node's
// addresses, externalIPs and LoadBalancer IPs from other hosts, a ClusterIP
// routed to the node by a host without socket-LB — are translated by a
// TCX ingress program (bpf/tcnat.c: tc_in4/tc_in6, a second bpf2go object,
// tcgen.go) on each interface of Config.Interfaces, in Config.NetNS. It
// reads the same services/backends maps (opened by pin; both objects take
// their definitions from bpf/lbmaps.h, TestTCMapsMatchSocketLB holds the
// compiled specs equal).
//
//	first packet of a flow to an entry point:
//	  known to conntrack (bpf_skb_ct_lookup)?  → pass, the kernel NATs it
//	  LB IP with source ranges, source outside → drop (like the iptables
//	                                             mode's DROP)
//	  no endpoints → TCP reset / ICMP(v6) port unreachable built in place
//	                 and sent back out of the interface (bpf_redirect)
//	  else pick a backend (random, or the client address's sticky one:
//	  client_affinity, LRU) and create the conntrack entry with its NAT
//	  set up: bpf_skb_ct_alloc, bpf_ct_set_nat_info(DST → backend) and,
//	  unless externalTrafficPolicy is Local (flagKeepSource), (SRC → the
//	  node's address toward the backend: bpf_fib_lookup with
//	  BPF_FIB_LOOKUP_SRC, the route's preferred source, as MASQUERADE
//	  picks it; the ingress interface's address, snat_addrs, where the FIB
//	  has none), bpf_ct_insert_entry. Not the ingress interface's address
//	  first: on vxlan the backend's node would get the request on
//	  flannel.1 from the node's eth0 address, route the reply to it over
//	  eth0, and strict rp_filter drops the request (found on kind).
//
// A reused source port: a TCP SYN (no ACK) whose tuple is the original
// direction of an entry in TIME_WAIT or CLOSE (a client that aborted or
// finished a connection and reconnects from the same port) would be taken
// by the kernel's TCP tracking as a reopened connection: it kills the entry
// and tracks the SYN anew, without NAT, and the node refuses it (issue 14).
// The program expires such an entry (bpf_ct_change_timeout 0, its state read
// with CO-RE) and sets the flow up as new; a retransmitted SYN of a flow
// still being set up keeps its entry. TestTCReusedSourcePort.
//
// Every later packet, both directions, is translated by the kernel's own
// NAT from that entry: checksums, TCP state, fragments, timeouts, replies
// un-NATed wherever they arrive (the pod-facing side included), and
// `conntrack -L` shows the flows and `-D` (the proxy core's stale-UDP
// cleanup) ends them. The program never rewrites a packet it passes.
//
// Why the conntrack kfuncs and not an own LRU map + bpf_l3/l4_csum_replace:
// with its own map the program would have to rewrite every packet in both
// directions on every path a reply can take (SNATed replies are addressed
// to the node and arrive on pod-facing interfaces the program is not on),
// handle TCP teardown, ICMP errors and fragments itself, and the proxy
// core's conntrack cleanup would not see its flows. With the kfuncs the
// program is one hash lookup plus one conntrack lookup per packet to an
// entry point (every other packet: one hash lookup), and NAT costs what
// the iptables/nftables modes' NAT costs, without their rule walk. The
// price: the namespace must track and NAT at all, which needs one
// nftables NAT chain (natTable, `table ip|ip6 nodenet-ebpf`, one rule that
// decides nothing; without a rule reading conntrack state the kernel
// registers no conntrack hooks and the NAT silently does not happen —
// measured: the entry is created, the SYN is answered by a reset). The tc
// path therefore needs nft on the node. Bench: BenchmarkProxyEBPFTC
// against BenchmarkProxyNFTables (bench/).
//
// TCX: verdicts that let a packet on are TCX_NEXT, not TC_ACT_OK (which
// would skip the programs after this one: the other family's was never
// run). Links are pinned as link-tc_in4|6-<interface> beside the cgroup
// links and re-pointed at the new program by a restarting process (no
// gap; an interface re-created with another index gets a new link); links
// of interfaces no longer configured are detached at load; Cleanup detaches
// and unpins them with the rest and deletes natTable. Conntrack entries
// left by the program then translate nothing and expire.
//
// loadBalancerSourceRanges: LB IP entry points with ranges carry
// flagSrcRanges and their allowed prefixes are in src_ranges (LPM trie
// keyed {entry point id, address}); syncs keep it with the entry point
// (tcsync.go: written, changed, removed, strays dropped by a full sync).
//
// Tests: tc_kernel_test.go, proxytest's topology with the socket programs on
// an empty cgroup (nettest.EmptyCgroup) and tc on the node's client-facing
// veth: NodePort to a remote backend (SNAT) and to a local one with eTP
// Local (client address kept), externalIP and LB IP, UDP, refusal of TCP
// and UDP on an external IP (IPv4 and IPv6), source ranges allow/deny,
// affinity by client address, endpoint change (new flows move, an
// established one stays), IPv6 NodePort, restart on the same pins (same
// link, established flow alive) and Cleanup (nothing attached, no pin, no
// table). tc_restart_kernel_test.go restarts the proxy three times under
// load through a NodePort with a local and a remote (SNAT) endpoint: two
// clients opening TCP connections back to back, UDP questions from new
// sockets, 20 established connections echoing every 50 ms; nothing fails.
// tc_suite_test.go runs proxytest.KernelSuite with
// tc on all of the node's interfaces and nothing in the cgroup: every case
// passes (hairpin included: the pod's packets are translated on its veth)
// (Metrics too, now that the mode is registered) but one:
// ExternalTrafficPolicyLocalFromInside skips (nodeOwnTrafficIsSocketLB)
// because its last step has the node itself connect, which is socket LB's
// and never passes a tc ingress program; its pod steps (pod1 through the
// LB IP and the NodePort to the remote endpoint, source kept; the client
// refused) are TestTCPodReachesETPLocalElsewhere (IPv4 and IPv6), tc on
// c0 and p1.
//
// IPv6 extension headers: tc_in6 walks up to six (MAX_EXT_HDRS)
// hop-by-hop, routing and destination-options headers, and a fragment
// header of a first fragment, to the TCP/UDP ports; the kernel's NAT then
// translates the flow with the headers in place, both ways (it finds the
// transport header itself). Later fragments carry no ports and pass:
// conntrack reassembles the datagram before NAT, under the entry the first
// fragment's flow made (as for IPv4). Past six headers, or behind AH/ESP
// or an unknown header, a packet passes untranslated. A refused TCP
// connection's reset is built without the client's extension headers
// (cut out with bpf_skb_adjust_room); a refused UDP datagram's port
// unreachable quotes them (up to 64 bytes, MAX_QUOTED_EXT) with the UDP
// header behind, which the client's kernel needs to find the socket.
// TestTCIPv6ExtensionHeaders: a client socket with IPV6_DSTOPTS reaches
// an IPv6 NodePort (TCP with data both ways, UDP) and is refused at once
// without endpoints (TCP and UDP).
//
// Not on the tc path: a refused packet with IPv4 options (or with more
// than 64 bytes of IPv6 extension headers) is dropped instead of
// answered; SCTP. SCTP entry points are
// programmed (socket LB rewrites an SCTP socket's connect like a TCP one,
// on kernels that have SCTP sockets), but the tc program passes SCTP
// packets untranslated: the conntrack kfuncs it creates flows with accept
// only TCP and UDP (bpf_skb_ct_lookup/alloc fail with -EPROTO for any
// other l4proto, net/netfilter/nf_conntrack_bpf.c), although conntrack and
// nf_nat themselves track SCTP and recompute its CRC32c when they rewrite
// ports. Translating SCTP in the program instead would mean an own flow
// table and rewriting every packet of both directions, on every interface
// a reply can come back on, with a CRC32c over the whole packet (its
// checksum covers the ports; bpf_l4_csum_replace is ones' complement
// only, so a byte loop over up to the MTU per packet), outside the
// kernel's conntrack that `conntrack -D` and the core's cleanup use. The
// kernel these tests run on has no SCTP sockets (CONFIG_IP_SCTP unset:
// socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) fails with
// EPROTONOSUPPORT), so neither path can be tested here end to end.
//
// # Choosing the tc interfaces (tcauto.go, tcfollow.go)
//
// --bpf-tc-interfaces=auto (AutoInterfaces, what the DaemonSet manifest
// passes) lets one manifest serve nodes whose NICs are named differently:
// at start, `nodenet proxy` reads its Node and NodeInterfaces picks the
// links of its namespace holding the Node's InternalIP/ExternalIP or a
// local address in --nodeport-addresses' CIDRs (SelectInterfaces), never
// the loopback, the CNI bridge (cni0), flannel's devices or pod veths
// (veth*). The interface is found by what it holds, not by its kind: the
// local cluster's node link is a veth called eth0. No link matching is
// an error at start. The choice then follows the node (Config.FollowNode):
// after each burst of address changes in the namespace (the subscription
// that keeps local_addrs) the links are listed and chosen again; a link
// that gained a node address (or one in --nodeport-addresses' CIDRs) gets
// the program, its SNAT address and a pinned link like the others, one
// that lost it or went away is unpinned (which detaches it) and its SNAT
// address forgotten, and a kept one's SNAT address is rewritten. Each
// change is logged and counted in
// nodenet_proxy_ebpf_tc_interface_changes_total{change=attached|detached}.
// The Node object's addresses are read at start only (a new InternalIP
// counts after a restart). An explicit --bpf-tc-interfaces list stays as
// given.
//
// # The local cluster
//
// Its nodes share one kernel. Each node's agent starts its pods in the
// node's cgroup (<cgroup2>/nodenet.slice/<cluster>-<node>), which `up`
// binds on the node root's sys/fs/cgroup, and the node root's sys/fs/bpf
// is a bpffs of its own: through the manifest's hostPaths each node's
// proxy attaches to its own node's pods and pins in its own tree. A bind
// mount of a child cgroup is a child for checkCgroup (its cgroup.type
// exists), so it needs no RootCgroupOK.
//
// # Not yet
//
// IPv4-mapped IPv6 destinations on IPv6 sockets.
package ebpf
