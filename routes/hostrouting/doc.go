// Package hostrouting is eBPF host routing for the pod network: two TCX
// ingress programs (bpf/hostrouting.c) forward pod-to-pod packets between
// the pod bridge and the interface other nodes' pods are reached through,
// past the node's netfilter hooks and routing passes. On a host-gw node a
// cross-node pod packet otherwise crosses the whole IP stack twice per node
// (bridge → routing → netfilter FORWARD/POSTROUTING → uplink, and back on
// the far side); with these programs each node does one FIB lookup and one
// redirect, which is what brings pod-to-pod close to node-to-node.
//
// Between two pods of the same node, the program on the sender's veth
// switches the frame (addressed to the other pod's MAC, which it has
// learnt from that pod's own frames, and at start from the kernel
// bridge's fdb) straight into the receiver's
// namespace: what the bridge would do, minus br_netfilter's conntrack and
// FORWARD hooks and the receiving veth's backlog queue. MACs and TTL stay
// as they are; the NAT test below applies as well.
//
// The kernel stays the authority: the FIB picks the egress interface and
// next hop, the neighbour table the MAC addresses. What the programs cannot
// do exactly as the stack would, they leave to it: anything that is not
// TCP/UDP between pods, fragments, IPv6 extension headers, TTLs about to
// expire, unresolved neighbours (the stack resolves them; the next packet
// is fast), and flows conntrack translates (service DNAT, masquerade), whose
// replies need the stack's reverse NAT. Since both directions of a
// pod-to-pod flow meet the same test on a node, a flow is either wholly
// seen by the node's conntrack or not at all.
//
// Nothing is pinned: the programs stay attached while the owning process
// holds the links. If it exits, they detach and traffic takes the stack
// path again, which is correct, only slower. The trade-off, as with
// Cilium's BPF host routing: pod-to-pod packets do not traverse the nodes'
// netfilter FORWARD chains (nor bridge-family rules on the pod bridge), so
// firewall rules there do not see them.
//
// Kernel: TCX (Linux 6.6), the conntrack lookup kfunc and BTF
// (/sys/kernel/btf/vmlinux) for its CO-RE read of the entry's status;
// flanneld fails to start with --host-routing=ebpf where they are missing,
// saying which step failed.
package hostrouting
