//go:build ignore

// eBPF host routing (see ../doc.go): pod-to-pod packets between nodes skip
// the node's IP stack. Two TCX ingress programs:
//
//   from_pods, on the host side of every pod's veth: a packet a local pod
//   sends to a pod of another node goes straight out of the interface the
//   FIB names (the uplink with host-gw, flannel.1 with vxlan). It runs
//   before the bridge, whose br_netfilter hooks would otherwise already
//   have tracked (and possibly translated) the packet.
//   It also switches a local pod's frame to another local pod straight
//   into that pod's namespace (bpf_redirect_peer), as the bridge would
//   but past br_netfilter's hooks and the second veth's backlog queue.
//   to_pods, on that interface: a packet from a pod of another node to a
//   local pod goes straight into the pod's namespace (bpf_redirect_peer),
//   past the bridge and the veth's backlog queue.
//
// Forwarding is what the kernel would do (FIB lookup, TTL/hop limit
// decrement, MAC rewrite from the neighbour table) minus netfilter and the
// routing passes in between. Everything else goes on to the stack untouched:
// other traffic (services, NodePorts, the node itself, the internet), ICMP,
// fragments, IPv6 extension headers, expiring TTLs, and every flow the
// kernel NATs (a proxy's DNAT, a masquerade), which only the stack can
// translate back. Both directions of a pod-to-pod flow meet the same test
// on a node, so conntrack sees all of a flow or none of it.

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// TCX_NEXT: later programs on the interface (a proxy's) still run.
#define NEXT TC_ACT_UNSPEC

#define AF_INET 2
#define AF_INET6 10

// Classes of addresses in the nets map.
#define NET_REMOTE_PODS 1 // the cluster's pod networks (other nodes' pods)
#define NET_LOCAL_PODS 2  // this node's pod subnets: more specific, so they win

// nets is an LPM trie over (family, address): the cluster's pod networks
// and, more specific, this node's own pod subnets.
struct net_key {
	__u32 prefixlen; // 32 (the family word) + the address bits
	__u32 family;
	__u32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 64);
	__type(key, struct net_key);
	__type(value, __u32);
} nets SEC(".maps");

// Per-CPU packet counters by outcome (the Go side's stat* constants).
enum stat {
	STAT_FORWARDED,   // redirected past the stack, out of an interface
	STAT_DELIVERED,   // redirected past the stack straight into a pod
	STAT_NOT_PODS,    // not pod to pod in this program's direction
	STAT_NOT_FAST,    // ICMP, fragment, extension header, TTL <= 1
	STAT_NAT,         // a flow conntrack translates
	STAT_NO_ROUTE,    // the FIB declined (MTU, not a unicast forward)
	STAT_SWITCHED,    // a local pod's frame redirected straight into another local pod
	STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// The pod bridge, as the Go side last saw it: frames from pods addressed to
// its MAC are the routed ones; a FIB result naming it means "a local pod".
struct bridge {
	__u8 mac[ETH_ALEN];
	__u16 pad;
	__u32 ifindex;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bridge);
} bridge_state SEC(".maps");

// fdb maps a pod's MAC to the host side of its veth, learnt from the
// frames the pod sends, as the bridge itself learns (and no more trusting:
// a pod that forges another's MAC could as well fool the bridge). The Go
// side forgets a veth's entries when it is deleted.
struct mac_key {
	__u8 mac[ETH_ALEN];
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct mac_key);
	__type(value, __u32);
} fdb SEC(".maps");

static __always_inline int count(enum stat s, int verdict)
{
	__u32 k = s;
	__u64 *v = bpf_map_lookup_elem(&stats, &k);
	if (v)
		*v += 1;
	return verdict;
}

static __always_inline __u32 classify(__u32 family, const __u32 *addr)
{
	struct net_key k = {.prefixlen = 32 + (family == AF_INET ? 32 : 128), .family = family};
	k.addr[0] = addr[0];
	if (family == AF_INET6) {
		k.addr[1] = addr[1];
		k.addr[2] = addr[2];
		k.addr[3] = addr[3];
	}
	__u32 *class = bpf_map_lookup_elem(&nets, &k);
	return class ? *class : 0;
}

// The conntrack kfuncs: bpf_skb_ct_lookup, bpf_ct_release.
#include "../../../internal/bpfinc/conntrack.h"

// The entry's status bits, at the running kernel's offset (CO-RE: the
// ___hr suffix is dropped when matching the kernel's BTF).
struct nf_conn___hr {
	unsigned long status;
} __attribute__((preserve_access_index));

// enum ip_conntrack_status: IPS_SRC_NAT | IPS_DST_NAT.
#define IPS_NAT_MASK ((1 << 4) | (1 << 5))

// translated says whether conntrack holds the flow with a NAT mapping in
// either direction; such packets must meet the stack's NAT.
static __always_inline int translated(struct __sk_buff *skb, struct bpf_sock_tuple *tup, __u32 len, __u8 proto)
{
	struct bpf_ct_opts opts = {.netns_id = BPF_F_CURRENT_NETNS, .l4proto = proto};
	struct nf_conn *ct = bpf_skb_ct_lookup(skb, tup, len, &opts, sizeof(opts));
	if (!ct)
		return 0;
	unsigned long status = ((struct nf_conn___hr *)ct)->status;
	bpf_ct_release(ct);
	return (status & IPS_NAT_MASK) != 0;
}

// Ports of a TCP or UDP header: the first four bytes of either.
struct ports {
	__be16 src, dst;
};

// redirect sends the packet where the FIB said, with its addresses: into
// the pod's namespace when the next hop is a local pod whose veth is known,
// otherwise out of the egress interface (the bridge's own transmit for an
// unknown local pod; it floods or knows better).
static __always_inline int redirect(struct __sk_buff *skb, struct bpf_fib_lookup *fib, int rc)
{
	__u32 zero = 0;
	struct bridge *br = bpf_map_lookup_elem(&bridge_state, &zero);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		// The neighbour subsystem resolves the next hop and sends the
		// packet (queued meanwhile), as the stack would.
		struct bpf_redir_neigh nh = {};
		if (fib->family == AF_INET) {
			nh.nh_family = AF_INET;
			nh.ipv4_nh = fib->ipv4_dst;
		} else {
			nh.nh_family = AF_INET6;
			__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, sizeof(nh.ipv6_nh));
		}
		count(STAT_FORWARDED, 0);
		return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
	}
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return count(STAT_NO_ROUTE, NEXT);
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	if (br && br->ifindex && fib->ifindex == br->ifindex) {
		struct mac_key k = {};
		__builtin_memcpy(k.mac, fib->dmac, ETH_ALEN);
		__u32 *veth = bpf_map_lookup_elem(&fdb, &k);
		if (veth) {
			count(STAT_DELIVERED, 0);
			return bpf_redirect_peer(*veth, 0);
		}
	}
	count(STAT_FORWARDED, 0);
	return bpf_redirect(fib->ifindex, 0);
}

// route does what both families share once the packet qualifies: the NAT
// test, then either the switch into a local pod's veth peer (to_peer, for
// a frame one local pod addressed to another) or the FIB lookup, the TTL /
// hop limit decrement and the redirect. fib comes with the family,
// protocol, addresses (and IPv6 flow label).
static __always_inline int route(struct __sk_buff *skb, struct bpf_sock_tuple *tup, __u32 tuplen,
				 struct bpf_fib_lookup *fib, __u32 to_peer)
{
	if (translated(skb, tup, tuplen, fib->l4_protocol))
		return count(STAT_NAT, NEXT);
	if (to_peer) {
		// Switched, not routed: MACs and TTL stay as the bridge would
		// leave them.
		count(STAT_SWITCHED, 0);
		return bpf_redirect_peer(to_peer, 0);
	}
	// tot_len stays 0: the helper then checks the egress MTU against the
	// skb itself, which knows about GSO (a header's length would be the
	// whole segmented super-packet's).
	fib->ifindex = skb->ingress_ifindex;
	int rc = bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return count(STAT_NO_ROUTE, NEXT);

	// The kfunc and helper calls invalidated the packet pointers.
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	if (fib->family == AF_INET) {
		struct iphdr *ip = data + sizeof(struct ethhdr);
		if ((void *)(ip + 1) > end)
			return count(STAT_NO_ROUTE, NEXT);
		// ip_decrease_ttl: the checksum changes by the TTL's weight.
		__u32 check = ip->check;
		check += bpf_htons(0x0100);
		ip->check = (__u16)(check + (check >= 0xffff));
		ip->ttl--;
	} else {
		struct ipv6hdr *ip = data + sizeof(struct ethhdr);
		if ((void *)(ip + 1) > end)
			return count(STAT_NO_ROUTE, NEXT);
		ip->hop_limit--;
	}
	return redirect(skb, fib, rc);
}

static __always_inline int forward4(struct __sk_buff *skb, __u32 want_src, __u32 want_dst, __u32 to_peer)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > end)
		return NEXT;
	__u32 src = ip->saddr, dst = ip->daddr;
	if (classify(AF_INET, &dst) != want_dst || classify(AF_INET, &src) != want_src)
		return count(STAT_NOT_PODS, NEXT);
	if ((ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP) || ip->ihl != 5 ||
	    (ip->frag_off & bpf_htons(0x3fff)) || ip->ttl <= 1)
		return count(STAT_NOT_FAST, NEXT);
	struct ports *p = (void *)(ip + 1);
	if ((void *)(p + 1) > end)
		return count(STAT_NOT_FAST, NEXT);
	struct bpf_sock_tuple tup = {.ipv4 = {.saddr = src, .daddr = dst, .sport = p->src, .dport = p->dst}};
	struct bpf_fib_lookup fib = {.family = AF_INET, .l4_protocol = ip->protocol, .ipv4_src = src, .ipv4_dst = dst};
	return route(skb, &tup, sizeof(tup.ipv4), &fib, to_peer);
}

static __always_inline int forward6(struct __sk_buff *skb, __u32 want_src, __u32 want_dst, __u32 to_peer)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ipv6hdr *ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > end)
		return NEXT;
	__u32 src[4], dst[4];
	__builtin_memcpy(src, ip->saddr.in6_u.u6_addr32, sizeof(src));
	__builtin_memcpy(dst, ip->daddr.in6_u.u6_addr32, sizeof(dst));
	if (classify(AF_INET6, dst) != want_dst || classify(AF_INET6, src) != want_src)
		return count(STAT_NOT_PODS, NEXT);
	// Extension headers (fragments among them) and ICMPv6 take the stack.
	if ((ip->nexthdr != IPPROTO_TCP && ip->nexthdr != IPPROTO_UDP) || ip->hop_limit <= 1)
		return count(STAT_NOT_FAST, NEXT);
	struct ports *p = (void *)(ip + 1);
	if ((void *)(p + 1) > end)
		return count(STAT_NOT_FAST, NEXT);
	struct bpf_sock_tuple tup = {.ipv6 = {.sport = p->src, .dport = p->dst}};
	__builtin_memcpy(tup.ipv6.saddr, src, sizeof(src));
	__builtin_memcpy(tup.ipv6.daddr, dst, sizeof(dst));
	struct bpf_fib_lookup fib = {
		.family = AF_INET6,
		.l4_protocol = ip->nexthdr,
		.flowinfo = *(__be32 *)ip & bpf_htonl(0x0fffffff),
	};
	__builtin_memcpy(fib.ipv6_src, src, sizeof(src));
	__builtin_memcpy(fib.ipv6_dst, dst, sizeof(dst));
	return route(skb, &tup, sizeof(tup.ipv6), &fib, to_peer);
}

// forward takes a packet between the classes of addresses named: routed
// by the FIB, or (to_peer set) switched into that veth's peer.
static __always_inline int forward(struct __sk_buff *skb, __u32 want_src, __u32 want_dst, __u32 to_peer)
{
	if (skb->protocol == bpf_htons(ETH_P_IP))
		return forward4(skb, want_src, want_dst, to_peer);
	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return forward6(skb, want_src, want_dst, to_peer);
	return NEXT;
}

static __always_inline int same_mac(const __u8 *a, const __u8 *b)
{
	return *(__u32 *)a == *(__u32 *)b && *(__u16 *)(a + 4) == *(__u16 *)(b + 4);
}

SEC("tc")
int from_pods(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return NEXT;
	if (!(eth->h_source[0] & 1)) {
		struct mac_key k = {};
		__builtin_memcpy(k.mac, eth->h_source, ETH_ALEN);
		__u32 *known = bpf_map_lookup_elem(&fdb, &k);
		if (!known || *known != skb->ifindex) {
			__u32 ifindex = skb->ifindex;
			bpf_map_update_elem(&fdb, &k, &ifindex, BPF_ANY);
		}
	}
	// Routed frames are addressed to the bridge (the pods' gateway).
	__u32 zero = 0;
	struct bridge *br = bpf_map_lookup_elem(&bridge_state, &zero);
	if (!br)
		return NEXT;
	if (same_mac(eth->h_dest, br->mac))
		return forward(skb, NET_LOCAL_PODS, NET_REMOTE_PODS, 0);
	// A frame to another local pod whose veth is known is switched here;
	// broadcasts, multicasts and unknown MACs are the bridge's business.
	if (eth->h_dest[0] & 1)
		return NEXT;
	struct mac_key k = {};
	__builtin_memcpy(k.mac, eth->h_dest, ETH_ALEN);
	__u32 *peer = bpf_map_lookup_elem(&fdb, &k);
	if (!peer || *peer == skb->ifindex)
		return NEXT;
	return forward(skb, NET_LOCAL_PODS, NET_LOCAL_PODS, *peer);
}

SEC("tc")
int to_pods(struct __sk_buff *skb)
{
	// Only frames addressed to this interface are routed.
	if (skb->pkt_type != 0 /* PACKET_HOST */)
		return NEXT;
	return forward(skb, NET_REMOTE_PODS, NET_LOCAL_PODS, 0);
}
