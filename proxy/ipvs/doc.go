// Package ipvs is the `--proxy-mode ipvs` data plane: kube-proxy's IPVS
// mode, behind proxy.DataPlane, with upstream's known faults fixed.
//
// # Kernel state
//
//   - IPVS virtual servers, one per entry point of a service port with
//     endpoints: ClusterIP:port, each externalIP:port and LB IP:port, and
//     node address:NodePort for each NodePort address (--nodeport-addresses,
//     or every non-loopback, non-link-local address of the node). Real
//     servers are the endpoints the core selected (proxy.Selection), NAT
//     forwarding, weight 1: ClusterIP gets the internal list (iTP), the
//     external entry points the external list (eTP Local: local endpoints
//     only, the client's address kept). Handle talks to the kernel over
//     generic netlink ("IPVS" family) with internal/nlmsg; Fake is its
//     stateful stand-in, held to the same contract test (the kernel side
//     runs in a VM, see vmtest).
//   - The VIPs (ClusterIPs, externalIPs, LB IPs) bound to the dummy device
//     nodenet-ipvs0, so the kernel treats packets to them as local, where
//     IPVS takes them. Strict ARP (arp_ignore=1, arp_announce=2) keeps the
//     node from answering ARP for them (kubernetes#59976). A kernel without
//     the dummy device fails the sync with that said.
//   - One small nft table per family, "nodenet-ipvs": sets keyed by
//     address . protocol . port mark traffic for masquerading with
//     proxy.MasqueradeMark (ClusterIP from outside --cluster-cidr or with
//     --masquerade-all; external entry points under eTP Cluster), masquerade
//     marked and hairpin traffic in postrouting, drop LB traffic from
//     outside loadBalancerSourceRanges, and refuse entry points without
//     endpoints (TCP reset, ICMP port unreachable) — they get no virtual
//     server, so a service without endpoints is refused, never blackholed.
//     Its "inside" map sends traffic from inside the cluster (a source in
//     --cluster-cidr, or the node itself, masqueraded) to an eTP=Local
//     entry point on to the Service's ClusterIP:port (DNAT before IPVS
//     sees it), whose virtual server has every endpoint: pods and the node
//     need no client address kept, so a node without local endpoints does
//     not refuse them (kubernetes#71596), as the iptables and nftables
//     modes send them to the cluster-wide endpoints. Outside clients still
//     get the local endpoints or the refusal. Under iTP=Local there is no
//     cluster-wide virtual server to send them to, and nothing is
//     redirected (iptables mode alike). A full sync rewrites the table in
//     one nft transaction; a partial sync, whose chains are those already
//     written, deletes and adds only the set and map elements that changed
//     (one transaction, none when nothing did), so its nft cost is that of
//     the change, not of every service.
//   - sysctls: net.ipv4.vs.conntrack=1 (the masquerade rule needs IPVS
//     connections in conntrack), expire_nodest_conn=1 and
//     expire_quiescent_template=1.
//
// # Behaviour
//
// Session affinity ClientIP is IPVS persistence with the Service's timeout
// (rounded to whole seconds). The scheduler is --ipvs-scheduler (rr by
// default) unless the Service carries the proxy.SchedulerAnnotation
// ("nodenet.io/ipvs-scheduler": rr, wrr, lc, wlc, lblc, lblcr, dh, sh,
// sed, nq, fo, ovf, mh). --ipvs-tcp-timeout, --ipvs-tcpfin-timeout and
// --ipvs-udp-timeout set the kernel's IPVS timeouts (0 leaves them).
//
// Graceful termination (kubernetes#57841, #81775): a real server that
// leaves the selection is set to weight 0 (no new connections) and deleted
// once it has no active and no inactive connections, or after
// Config.GracefulTimeout (15 minutes); it is checked at every sync and at
// every integrity check the core polls. An endpoint that comes back while
// draining gets its weight back. UDP real servers have no connections to
// finish and are deleted at once (the next datagram of a flow is
// rescheduled: expire_nodest_conn), as kube-proxy does.
//
// Syncs are incremental. The proxier keeps what it wrote: the virtual
// and real servers as the kernel holds them, the device's VIPs, and the
// table's elements, each counted by the entry points that want it
// (accounts: a VIP with several ports, or an endpoint's hairpin element
// shared by services, goes only when no entry point wants it). A partial
// sync counts the changed service ports' old entries out and their new
// ones in and writes only what that changed, reading nothing back: nft
// elements in one transaction (none, no nft run), VIPs over one route
// netlink socket (additions 64 to a request), and virtual and real
// servers up to 256 to a generic netlink request (Handle.Apply), the
// acknowledgements read per request. Its cost is that of the change, not of the number
// of services: TestPartialSyncCostIsTheChange counts it on the fake and
// TestKernelPartialSyncRequests on the kernel. The node's addresses
// (NodePorts on every address) are read again only by a partial sync
// that writes a NodePort, and a change in them makes the sync a full
// one. A full sync (the first, the core's periodic or after a failure)
// lists the kernel's virtual servers, the real servers of those wanted
// and the VIPs, rewrites the table in one transaction, deletes
// nodenet's virtual servers that no service wants — leftovers of
// services deleted while the proxy was down — and so refreshes the
// memory. A write that fails makes the services of its sync's writes
// unsure (the kernel goes on past a failed message of a request): the
// next sync, partial or full, reads them back and rewrites the ports
// that want them (TestFailedPartialWriteIsRepaired); a failed nft write
// or VIP write makes the next sync rewrite the whole table or list the
// VIPs. Each sync's phases are timed and logged at debug level ("ipvs
// sync phases"). Cleanup removes nodenet's virtual servers, the table
// and the device, from any process; on a kernel without IPVS only the
// rest.
//
// Ownership: a virtual server is nodenet's when its address is on
// nodenet-ipvs0 (ClusterIPs, externalIPs, LB IPs), or when it is a
// NodePort on a node address recorded in the table's "nodeports" set.
// Each sync writes that record (the NodePorts it wants, plus recorded ones
// the kernel still has) before making the virtual servers it names, and a
// restarted proxy or a Cleanup reads it back, so no other IPVS user's
// virtual server is deleted, on the node's addresses either (keepalived or
// LVS next to nodenet; kube-proxy's cleanup flushes all of IPVS). A
// NodePort virtual server made by a build without the record is not known
// as nodenet's.
//
// A kernel without IPVS fails Open with ErrNoIPVS ("the kernel has no IPVS
// (ip_vs): /proc/net/ip_vs missing and the IPVS generic netlink family
// unknown"): the proxy refuses to start and `nodenet up` refuses the mode
// before starting anything (Probe).
//
// Tests: the fake-backed unit and golden tests (testdata/golden-*.ipvs)
// run anywhere; TestInVM boots Debian's kernel under qemu (package vmtest)
// and runs the contract, traffic and partial-sync request-count tests
// there (about 35 s with warm caches); TestInVMModeSwitch switches ipvs →
// iptables → nftables → ipvs through the API server (proxytest.SwitchSuite: none of the old mode's
// state left, a ClusterIP answering under each), runs the ebpf mode's
// Cleanup on the VM's kernel (the ebpf data plane itself needs a newer one
// than 6.1) and checks that foreign virtual servers survive full syncs and
// Cleanup; TestInVMSuite runs the shared proxytest.KernelSuite (about 65 s
// with an idle host), every case. The guest gets NODENET_TEST_WAIT=60s:
// under TCG on a loaded 2-core host a sync plus a dial took longer than
// the suites' 10 s. A failed sync counts on kube-proxy's
// kubeproxy_sync_proxy_rules_iptables_restore_failures_total, which
// kube-proxy's ipvs mode serves (for its iptables rule set; this mode's
// is nft).
package ipvs
