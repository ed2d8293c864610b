// Package flanneld is nodenet's drop-in for upstream flanneld: it gives its
// node a share of the cluster network (a subnet per IP family), tells the
// CNI plugin about it through subnet.env, and connects that subnet to every
// other node's — except with the alloc backend, where the network outside
// the nodes does (a VPC router with a route per node podCIDR).
//
// The pieces, in the order a Daemon runs them:
//
//   - Config (config.go): net-conf.json, upstream's keys, validated before
//     anything touches the kernel.
//   - the external interface (iface_linux.go): --iface / --iface-regex /
//     --iface-can-reach / the default route's interface, read-only.
//   - a subnet manager: kube mode (kubesm.go) takes node.spec.podCIDRs and
//     publishes flannel's node annotations; lease mode (leasesm.go) claims a
//     subnet itself through coordination.k8s.io Leases named after the
//     subnet, so the API server's create is the atomic claim.
//   - a backend (hostgw_linux.go, vxlan_linux.go, alloc_linux.go) that
//     turns the peers' leases into routes, neighbours and FDB entries
//     through routes/ — alloc, upstream's allocate-only backend, into
//     none. Before it starts, flannel's vxlan devices the configuration
//     does not use are deleted (stale_linux.go), so switching backends
//     leaves no device, neighbour or route of the old one. The
//     vxlan devices' TX checksum offload follows Backend.TxChecksumOffload
//     (or --vxlan-tx-checksum-offload): on as upstream, off as flannel's
//     documented workaround, or auto, the default, which keeps it on unless
//     a start-up self-test in a private namespace shows this kernel
//     corrupts NATed VXLAN checksums and the node is then seen NATing its
//     VXLAN packets (txcsum_linux.go says why and what it costs). With
//     --vxlan-notrack (the command's default) the tunnel's own UDP packets
//     are exempted from connection tracking in the raw table (notrack.go):
//     each pod connection would otherwise cost two outer conntrack entries
//     per node, and nothing NATs them (so the NAT checksum bug above
//     cannot arise either).
//   - ip-masq rules (masq*.go) in iptables or nftables, in chains/tables of
//     our own; with iptables the jump to our FORWARD accepts is appended,
//     so the proxy's rejects and firewall, inserted first, still see new
//     flows whichever daemon started first.
//   - with --host-routing=ebpf (hostrouting_linux.go), the eBPF host
//     routing of routes/hostrouting: pod-to-pod packets between nodes are
//     forwarded by TCX programs on the pod veths and the uplinks (the
//     external interface, and the vxlan devices), past netfilter, and
//     packets between two local pods are switched past the bridge. The
//     programs live as long as the daemon; without them (the default,
//     kernel) the kernel forwards, as upstream flannel.
//   - subnet.env (package subnetenv), then the CNI conflist (cniconf.go),
//     only once the backend is up, so the CNI plugin never sees a conflist
//     without its subnet.env.
//
// Cleanup (cleanup_linux.go, `nodenet flanneld --cleanup`) is the
// uninstall path: it removes what a daemon put on its node, recognising it
// by the marks the daemon itself goes by (route protocol inside the
// cluster networks, the vxlan device names, our chains and tables), and
// reuses the route sync and the masqueraders' own Cleanup to do it.
//
// Everything kernel-side goes through a Netns (netns_linux.go): "" is the
// daemon's own namespace (the DaemonSet), a name or path runs the same code
// against a node namespace of a local cluster or a test.
//
// Informer handlers never touch the kernel: they nudge a runner
// (runner.go) that reconciles the whole desired state, rate-limited, and
// again every resync period. Cancelling Run (SIGTERM) leaves the data plane
// as it is, so a restart does not drop traffic; a restarted daemon
// reconciles only after its caches have synced, so it never removes a route
// merely because it has not heard of the peer yet.
package flanneld
