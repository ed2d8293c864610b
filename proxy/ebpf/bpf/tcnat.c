//go:build ignore

// Traffic that arrives from outside the node (NodePort on the node's
// addresses, externalIPs, LoadBalancer IPs, a ClusterIP routed to the node)
// for nodenet's ebpf data plane (see ../doc.go, "Traffic from outside").
//
// A TCX ingress program on the node's external interfaces looks the
// destination up in the same services/backends maps the socket programs use
// (socklb.c; the definitions below must stay identical, which
// TestTCMapsMatchSocketLB checks). For the first packet of a flow it picks a
// backend and creates a kernel conntrack entry with the NAT already set up
// (conntrack kfuncs): DNAT to the backend and, unless the entry point keeps
// the client's address (externalTrafficPolicy Local), SNAT to the node's
// address on that interface. From then on the kernel's own NAT translates
// every packet of the flow in both directions (checksums, TCP state,
// fragments, `conntrack -L/-D`); the program only recognises the flow as
// known and passes it. An entry point without endpoints is refused right
// here: a TCP reset or an ICMP port unreachable goes back out of the
// interface the packet came in on.
//
// Every map is per IP family, like socklb.c: tc_in4 is loaded against the
// IPv4 set, tc_in6 against the IPv6 one; each passes the other family.

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in6.h>
#include <linux/icmpv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lbmaps.h"

char __license[] SEC("license") = "Dual MIT/GPL";

// Every verdict that lets a packet go on is "next program" (TCX_NEXT): with
// TCX, TC_ACT_OK would also skip the programs after this one, such as the
// other family's.
#define NEXT TC_ACT_UNSPEC

// linux/icmp.h pulls in libc headers; the part used here.
struct icmphdr {
	__u8 type;
	__u8 code;
	__u16 checksum;
	__u32 unused;
};
#define ICMP_DEST_UNREACH 3
#define ICMP_PORT_UNREACH 3

// The tc path's own maps.

// An allowed source prefix of an entry point with SVC_SRC_RANGES: the
// trie's prefix covers the id (32 bits) and then the address.
struct src_key {
	__u32 prefixlen;
	__u32 id;
	__u32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct src_key);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} src_ranges SEC(".maps");

// The node's address on each attached interface (by ifindex): the source
// of SNATed flows, so replies come back to this node.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct addrport);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} snat_addrs SEC(".maps");

// sessionAffinity ClientIP for the tc path: keyed by the client's address
// (socklb.c's affinity map is keyed by network namespace, which a packet
// from another host does not have).
struct client_key {
	__u32 addr[4];
	__u32 id; // backend set of the entry point
};

struct aff_value {
	__u64 used; // bpf_ktime_get_ns() of the last new flow
	__u32 slot;
	__u32 pad;
	struct addrport backend; // checked on use: the slot may hold another one by now
	__u32 pad2;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct client_key);
	__type(value, struct aff_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} client_affinity SEC(".maps");

// The conntrack kfuncs (net/netfilter/nf_conntrack_bpf.c, nf_nat_bpf.c):
// lookup and release from the shared header, the ones only this program
// calls (allocating, inserting, NAT set-up, timeouts) below.
#include "../../../internal/bpfinc/conntrack.h"

// A new entry before bpf_ct_insert_entry; opaque, defined for the loader
// as struct nf_conn is.
struct nf_conn___init {
	int opaque;
};

union nf_inet_addr {
	__u32 all[4];
	__be32 ip;
	__be32 ip6[4];
};

enum nf_nat_manip_type { NF_NAT_MANIP_SRC, NF_NAT_MANIP_DST };

extern struct nf_conn___init *bpf_skb_ct_alloc(struct __sk_buff *, struct bpf_sock_tuple *, __u32,
					       struct bpf_ct_opts *, __u32) __ksym;
extern struct nf_conn *bpf_ct_insert_entry(struct nf_conn___init *) __ksym;
extern int bpf_ct_set_nat_info(struct nf_conn___init *, union nf_inet_addr *, int port,
			       enum nf_nat_manip_type) __ksym;
extern int bpf_ct_change_timeout(struct nf_conn *, __u32) __ksym;

// The part of the kernel's entry the program reads: the TCP state. A
// flavor (the ___ suffix is dropped when matching the kernel's BTF) with
// CO-RE relocations, so the offsets are the running kernel's.
struct ip_ct_tcp___tc {
	__u8 state;
} __attribute__((preserve_access_index));
union nf_conntrack_proto___tc {
	struct ip_ct_tcp___tc tcp;
} __attribute__((preserve_access_index));
struct nf_conn___tc {
	union nf_conntrack_proto___tc proto;
} __attribute__((preserve_access_index));

// enum tcp_conntrack (include/uapi/linux/netfilter/nf_conntrack_tcp.h).
#define TCP_CONNTRACK_TIME_WAIT 7
#define TCP_CONNTRACK_CLOSE 8

// A parsed packet of either family: what the lookups and the refusal need.
struct flow {
	__u32 saddr[4], daddr[4];
	__u16 sport, dport; // network byte order
	__u8 proto;
	__u8 v6;
	__u32 l4off;    // offset of the TCP/UDP header
	__u32 l3len;    // network header length
	__u32 payload;  // L4 bytes (header and data) in the packet
};

// pick chooses a new flow's backend: the client's sticky one while it is
// fresh and still in its slot, else one at random.
static __always_inline struct addrport *pick(const struct svc_value *svc, const struct flow *f)
{
	__u64 now = bpf_ktime_get_ns();
	struct client_key ck = {.id = svc->id};
	__builtin_memcpy(ck.addr, f->saddr, sizeof(ck.addr));
	struct backend_key bk = {.id = svc->id};
	struct addrport *be = NULL;
	if (svc->flags & SVC_AFFINITY) {
		struct aff_value *av = bpf_map_lookup_elem(&client_affinity, &ck);
		if (av && now - av->used <= (__u64)svc->affinity * 1000000000ULL) {
			bk.slot = av->slot;
			be = bpf_map_lookup_elem(&backends, &bk);
			if (be && !same_backend(be, &av->backend))
				be = NULL;
		}
	}
	if (!be) {
		// A shrinking set lowers count before deleting the tail (see
		// sync.go), so a missing slot is an instant's race: take slot 0.
		bk.slot = bpf_get_prandom_u32() % svc->count;
		be = bpf_map_lookup_elem(&backends, &bk);
		if (!be) {
			bk.slot = 0;
			be = bpf_map_lookup_elem(&backends, &bk);
		}
		if (!be)
			return NULL;
	}
	if (svc->flags & SVC_AFFINITY) {
		struct aff_value av = {.used = now, .slot = bk.slot, .backend = *be};
		bpf_map_update_elem(&client_affinity, &ck, &av, BPF_ANY);
	}
	return be;
}

static __always_inline __u16 fold(__s64 sum)
{
	__u32 s = (__u32)sum;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

// swap_eth sends the frame back where it came from.
static __always_inline int swap_eth(struct __sk_buff *skb)
{
	__u8 mac[12], swapped[12];
	if (bpf_skb_load_bytes(skb, 0, mac, sizeof(mac)))
		return -1;
	__builtin_memcpy(swapped, mac + 6, 6);
	__builtin_memcpy(swapped + 6, mac, 6);
	return bpf_skb_store_bytes(skb, 0, swapped, sizeof(swapped), 0);
}

// reset turns a TCP packet into the reset a closed port answers with
// (RFC 9293 3.10.7.1), addressed back to the sender.
static __always_inline int reset(struct __sk_buff *skb, struct flow *f)
{
	struct tcphdr in;
	// The answer's network header is written at the fixed header's size.
	if (f->l3len != (f->v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr)) ||
	    bpf_skb_load_bytes(skb, f->l4off, &in, sizeof(in)))
		return TC_ACT_SHOT;
	if (in.rst)
		return TC_ACT_SHOT;
	struct tcphdr out = {.source = in.dest, .dest = in.source, .doff = 5, .rst = 1};
	if (in.ack) {
		out.seq = in.ack_seq;
	} else {
		__u32 len = f->payload - in.doff * 4 + in.syn + in.fin;
		out.ack = 1;
		out.ack_seq = bpf_htonl(bpf_ntohl(in.seq) + len);
	}
	// The pseudo header (addresses swapped) and the new header.
	struct {
		__u32 src[4], dst[4];
		__u32 len;
		__u32 proto;
	} ph = {.len = bpf_htonl(sizeof(out)), .proto = bpf_htonl(IPPROTO_TCP)};
	__builtin_memcpy(ph.src, f->daddr, sizeof(ph.src));
	__builtin_memcpy(ph.dst, f->saddr, sizeof(ph.dst));
	__s64 sum;
	if (f->v6)
		sum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	else {
		// IPv4's pseudo header: src, dst, zero+proto, length.
		__u32 ph4[3] = {f->daddr[0], f->saddr[0], bpf_htonl((IPPROTO_TCP << 16) | sizeof(out))};
		sum = bpf_csum_diff(0, 0, ph4, sizeof(ph4), 0);
	}
	sum = bpf_csum_diff(0, 0, (__be32 *)&out, sizeof(out), sum);
	out.check = fold(sum);
	if (bpf_skb_change_tail(skb, f->l4off + sizeof(out), 0))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, f->l4off, &out, sizeof(out), 0))
		return TC_ACT_SHOT;
	return sizeof(out);
}

// unreachable builds an ICMP(v6) port unreachable quoting the start of the
// datagram (its network header and the 8-byte UDP header), in place.
static __always_inline int unreachable4(struct __sk_buff *skb, struct flow *f)
{
	__u8 quote[sizeof(struct iphdr) + 8];
	if (f->l3len != sizeof(struct iphdr) || bpf_skb_load_bytes(skb, ETH_HLEN, quote, sizeof(quote)))
		return TC_ACT_SHOT;
	struct icmphdr icmp = {.type = ICMP_DEST_UNREACH, .code = ICMP_PORT_UNREACH};
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)&icmp, sizeof(icmp), 0);
	sum = bpf_csum_diff(0, 0, (__be32 *)quote, sizeof(quote), sum);
	icmp.checksum = fold(sum);
	__u32 off = ETH_HLEN + sizeof(struct iphdr);
	if (bpf_skb_change_tail(skb, off + sizeof(icmp) + sizeof(quote), 0) ||
	    bpf_skb_store_bytes(skb, off, &icmp, sizeof(icmp), 0) ||
	    bpf_skb_store_bytes(skb, off + sizeof(icmp), quote, sizeof(quote), 0))
		return TC_ACT_SHOT;
	return sizeof(icmp) + sizeof(quote);
}

// The most of a datagram's extension headers an ICMPv6 error quotes; a
// datagram with more is dropped instead of answered.
#define MAX_QUOTED_EXT 64

static __always_inline int unreachable6(struct __sk_buff *skb, struct flow *f)
{
	// The quote holds the extension headers too: the client's kernel
	// walks them to the UDP header to find the socket to tell.
	__u8 quote[sizeof(struct ipv6hdr) + MAX_QUOTED_EXT + 8];
	__u32 qlen = f->l3len + 8;
	if (qlen < sizeof(struct ipv6hdr) + 8 || qlen > sizeof(quote) || bpf_skb_load_bytes(skb, ETH_HLEN, quote, qlen))
		return TC_ACT_SHOT;
	struct icmp6hdr icmp = {.icmp6_type = ICMPV6_DEST_UNREACH, .icmp6_code = ICMPV6_PORT_UNREACH};
	__u32 len = sizeof(icmp) + qlen;
	struct {
		__u32 src[4], dst[4];
		__u32 len;
		__u32 proto;
	} ph = {.len = bpf_htonl(len), .proto = bpf_htonl(IPPROTO_ICMPV6)};
	__builtin_memcpy(ph.src, f->daddr, sizeof(ph.src));
	__builtin_memcpy(ph.dst, f->saddr, sizeof(ph.dst));
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	sum = bpf_csum_diff(0, 0, (__be32 *)&icmp, sizeof(icmp), sum);
	sum = bpf_csum_diff(0, 0, (__be32 *)quote, qlen, sum);
	if (sum < 0)
		return TC_ACT_SHOT;
	icmp.icmp6_cksum = fold(sum);
	__u32 off = ETH_HLEN + sizeof(struct ipv6hdr);
	if (bpf_skb_change_tail(skb, off + len, 0) || bpf_skb_store_bytes(skb, off, &icmp, sizeof(icmp), 0) ||
	    bpf_skb_store_bytes(skb, off + sizeof(icmp), quote, qlen, 0))
		return TC_ACT_SHOT;
	return len;
}

// refuse answers a packet for an entry point without endpoints the way a
// REJECT rule does, and sends the answer back out of the interface.
static __always_inline int refuse(struct __sk_buff *skb, struct flow *f)
{
	int l4len;
	__u8 proto = f->proto;
	if (proto == IPPROTO_TCP && f->v6 && f->l3len > sizeof(struct ipv6hdr)) {
		// The reset carries none of the client's extension headers: cut
		// them out, so the TCP header follows the fixed header that is
		// rewritten below. (A UDP datagram's ICMPv6 error quotes them,
		// unreachable6.)
		if (bpf_skb_adjust_room(skb, -(__s32)(f->l3len - sizeof(struct ipv6hdr)), BPF_ADJ_ROOM_NET, 0))
			return TC_ACT_SHOT;
		f->l3len = sizeof(struct ipv6hdr);
		f->l4off = ETH_HLEN + sizeof(struct ipv6hdr);
	}
	if (proto == IPPROTO_TCP)
		l4len = reset(skb, f);
	else if (f->v6) {
		l4len = unreachable6(skb, f);
		proto = IPPROTO_ICMPV6;
	} else {
		l4len = unreachable4(skb, f);
		proto = IPPROTO_ICMP;
	}
	if (l4len < 0)
		return TC_ACT_SHOT;
	if (f->v6) {
		struct ipv6hdr ip = {.version = 6, .payload_len = bpf_htons(l4len), .nexthdr = proto, .hop_limit = 64};
		__builtin_memcpy(&ip.saddr, f->daddr, 16);
		__builtin_memcpy(&ip.daddr, f->saddr, 16);
		if (bpf_skb_store_bytes(skb, ETH_HLEN, &ip, sizeof(ip), 0))
			return TC_ACT_SHOT;
	} else {
		struct iphdr ip = {.version = 4, .ihl = 5, .tot_len = bpf_htons(sizeof(ip) + l4len), .ttl = 64,
				   .protocol = proto, .saddr = f->daddr[0], .daddr = f->saddr[0]};
		ip.check = fold(bpf_csum_diff(0, 0, (__be32 *)&ip, sizeof(ip), 0));
		if (bpf_skb_store_bytes(skb, ETH_HLEN, &ip, sizeof(ip), 0))
			return TC_ACT_SHOT;
	}
	if (swap_eth(skb))
		return TC_ACT_SHOT;
	return bpf_redirect(skb->ifindex, 0);
}

static __always_inline int allowed_source(const struct svc_value *svc, struct flow *f)
{
	if (!(svc->flags & SVC_SRC_RANGES))
		return 1;
	struct src_key k = {.prefixlen = 32 + (f->v6 ? 128 : 32), .id = svc->id};
	__builtin_memcpy(k.addr, f->saddr, sizeof(k.addr));
	return bpf_map_lookup_elem(&src_ranges, &k) != NULL;
}

// from_cluster tells whether f's source is in the cluster CIDRs.
static __always_inline int from_cluster(struct flow *f)
{
	struct src_key k = {.prefixlen = 32 + (f->v6 ? 128 : 32), .id = CLUSTER_CIDRS_ID};
	__builtin_memcpy(k.addr, f->saddr, sizeof(k.addr));
	return bpf_map_lookup_elem(&src_ranges, &k) != NULL;
}

// reopens tells whether the packet is a TCP SYN (no ACK) in the original
// direction of an entry whose connection is over (TIME_WAIT or CLOSE):
// the case the kernel's TCP tracking treats as a reopened connection. A
// retransmitted SYN of a flow being set up keeps its entry (and backend).
static __always_inline int reopens(struct __sk_buff *skb, struct flow *f, struct nf_conn *ct,
				   struct bpf_ct_opts *opts)
{
	if (f->proto != IPPROTO_TCP || opts->dir != 0)
		return 0;
	__u8 flags; // byte 13 of the TCP header: CWR ECE URG ACK PSH RST SYN FIN
	if (bpf_skb_load_bytes(skb, f->l4off + 13, &flags, 1))
		return 0;
	if ((flags & 0x12) != 0x02)
		return 0;
	__u8 state = ((struct nf_conn___tc *)ct)->proto.tcp.state;
	return state == TCP_CONNTRACK_TIME_WAIT || state == TCP_CONNTRACK_CLOSE;
}

// Address families of bpf_fib_lookup (the socket headers are not BPF's).
#define AF_INET 2
#define AF_INET6 10

// snat_source sets src to the node's address toward the backend: the
// preferred source of the route the translated packet takes, which is the
// address MASQUERADE picks (the egress interface's). Replies then return
// the way the request left. The address of the interface the request came
// in by would not do on an overlay: a backend behind flannel.1 would see
// the request arrive on flannel.1 from the node's eth0 address, which its
// node routes back over eth0, and strict reverse-path filtering drops it.
// Non-zero when the FIB gives no such route (a backend on the node
// itself, forwarding off); the caller then uses the interface's address.
static __always_inline int snat_source(struct __sk_buff *skb, const struct flow *f, const struct addrport *be,
				       union nf_inet_addr *src)
{
	struct bpf_fib_lookup fib = {.l4_protocol = f->proto, .ifindex = skb->ingress_ifindex};
	if (f->v6) {
		fib.family = AF_INET6;
		__builtin_memcpy(fib.ipv6_src, f->saddr, sizeof(fib.ipv6_src));
		__builtin_memcpy(fib.ipv6_dst, be->addr, sizeof(fib.ipv6_dst));
	} else {
		fib.family = AF_INET;
		fib.ipv4_src = f->saddr[0];
		fib.ipv4_dst = be->addr[0];
	}
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SRC | BPF_FIB_LOOKUP_SKIP_NEIGH) !=
	    BPF_FIB_LKUP_RET_SUCCESS)
		return -1;
	if (f->v6)
		__builtin_memcpy(src->ip6, fib.ipv6_src, sizeof(src->ip6));
	else
		src->ip = fib.ipv4_src;
	return 0;
}

// nat sets up the conntrack entry of a new flow to an entry point; the
// kernel's NAT does the rest.
static __always_inline int nat(struct __sk_buff *skb, struct flow *f, struct bpf_sock_tuple *tup, __u32 tuplen)
{
	struct svc_key key = {.port = f->dport, .proto = f->proto};
	__builtin_memcpy(key.addr, f->daddr, sizeof(key.addr));
	struct svc_key found;
	struct svc_value *svc = find_svc(&key, &found);
	if (!svc)
		return NEXT;
	// A pod (of this node or another) reaching an eTP=Local entry point:
	// the cluster-wide endpoints, as for socket LB.
	if ((svc->flags & SVC_INSIDE) && from_cluster(f))
		svc = inside_of(&found, svc);
	struct bpf_ct_opts opts = {.netns_id = BPF_F_CURRENT_NETNS, .l4proto = f->proto};
	struct nf_conn *ct = bpf_skb_ct_lookup(skb, tup, tuplen, &opts, sizeof(opts));
	if (ct && reopens(skb, f, ct, &opts)) {
		// A new connection on the tuple of a finished one (the client
		// reused its source port): the kernel would kill the old entry
		// on this SYN and track it anew without NAT, and the node would
		// refuse it. Expire the entry; the lookup drops an expired one,
		// and the flow is set up as new below.
		bpf_ct_change_timeout(ct, 0);
		bpf_ct_release(ct);
		opts.netns_id = BPF_F_CURRENT_NETNS;
		opts.dir = 0;
		ct = bpf_skb_ct_lookup(skb, tup, tuplen, &opts, sizeof(opts));
	}
	if (ct) {
		// A known flow (or a reply's tuple): the kernel translates it.
		bpf_ct_release(ct);
		return NEXT;
	}
	if (!allowed_source(svc, f))
		return TC_ACT_SHOT;
	if (svc->count == 0)
		return refuse(skb, f);
	struct addrport *be = pick(svc, f);
	if (!be)
		return NEXT;
	union nf_inet_addr dst = {}, src = {};
	__builtin_memcpy(dst.all, be->addr, sizeof(dst.all));
	int port = bpf_ntohs(be->port);
	int snat = !(svc->flags & SVC_KEEP_SOURCE);
	if (snat && snat_source(skb, f, be, &src)) {
		__u32 ifindex = skb->ingress_ifindex;
		struct addrport *node = bpf_map_lookup_elem(&snat_addrs, &ifindex);
		if (!node)
			return TC_ACT_SHOT; // the Go side writes every attached interface's address
		__builtin_memcpy(src.all, node->addr, sizeof(src.all));
	}
	opts.netns_id = BPF_F_CURRENT_NETNS;
	struct nf_conn___init *nct = bpf_skb_ct_alloc(skb, tup, tuplen, &opts, sizeof(opts));
	if (!nct)
		return TC_ACT_SHOT;
	int err = bpf_ct_set_nat_info(nct, &dst, port, NF_NAT_MANIP_DST);
	if (!err && snat)
		err = bpf_ct_set_nat_info(nct, &src, -1, NF_NAT_MANIP_SRC);
	// An allocated entry can only be given up by inserting it.
	ct = bpf_ct_insert_entry(nct);
	if (ct)
		bpf_ct_release(ct);
	// Without its NAT (or its entry: a racing first packet won) the flow
	// must not reach the stack untranslated; the client retransmits.
	return err || !ct ? TC_ACT_SHOT : NEXT;
}

static __always_inline int ports(struct __sk_buff *skb, struct flow *f)
{
	__u16 p[2];
	if (bpf_skb_load_bytes(skb, f->l4off, p, sizeof(p)))
		return -1;
	f->sport = p[0];
	f->dport = p[1];
	return 0;
}

SEC("tc")
int tc_in4(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return NEXT;
	struct iphdr ip;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)))
		return NEXT;
	if (ip.protocol != IPPROTO_TCP && ip.protocol != IPPROTO_UDP)
		return NEXT;
	// Later fragments carry no ports; conntrack reassembles them before
	// NAT, under the entry the first fragment made.
	if (ip.frag_off & bpf_htons(0x1fff))
		return NEXT;
	struct flow f = {.proto = ip.protocol, .saddr = {ip.saddr}, .daddr = {ip.daddr}};
	f.l3len = ip.ihl * 4;
	f.l4off = ETH_HLEN + f.l3len;
	f.payload = bpf_ntohs(ip.tot_len) - f.l3len;
	if (f.l3len < sizeof(ip) || ports(skb, &f))
		return NEXT;
	struct bpf_sock_tuple tup = {.ipv4 = {.saddr = ip.saddr, .daddr = ip.daddr, .sport = f.sport, .dport = f.dport}};
	return nat(skb, &f, &tup, sizeof(tup.ipv4));
}

// At most this many IPv6 extension headers are walked to find TCP/UDP: a
// packet with more (none that RFC 8200's recommended order produces) is
// passed untranslated.
#define MAX_EXT_HDRS 6

struct ipv6_frag {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; // offset in 8-byte units << 3 | flags
	__be32 id;
};

// skip_ext6 walks the extension headers from *off (nexthdr *proto):
// hop-by-hop, routing and destination options are skipped by their
// length; a fragment header is skipped on a first fragment, whose
// TCP/UDP header follows it (conntrack reassembles the datagram before
// NAT, under the entry the first fragment's flow made, as for IPv4). A
// later fragment, an unknown header (AH, ESP, ...) or too many leave
// *proto at something else than TCP/UDP: the packet is passed.
static __always_inline void skip_ext6(struct __sk_buff *skb, __u8 *proto, __u32 *off)
{
#pragma unroll
	for (int i = 0; i < MAX_EXT_HDRS; i++) {
		switch (*proto) {
		case IPPROTO_HOPOPTS:
		case IPPROTO_ROUTING:
		case IPPROTO_DSTOPTS: {
			__u8 h[2]; // next header, length in 8 bytes after the first 8
			if (bpf_skb_load_bytes(skb, *off, h, sizeof(h))) {
				*proto = IPPROTO_NONE;
				return;
			}
			*proto = h[0];
			*off += ((__u32)h[1] + 1) * 8;
			break;
		}
		case IPPROTO_FRAGMENT: {
			struct ipv6_frag fh;
			if (bpf_skb_load_bytes(skb, *off, &fh, sizeof(fh)) || (fh.frag_off & bpf_htons(0xfff8))) {
				*proto = IPPROTO_NONE; // a later fragment carries no ports
				return;
			}
			*proto = fh.nexthdr;
			*off += sizeof(fh);
			break;
		}
		default:
			return;
		}
	}
}

SEC("tc")
int tc_in6(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_IPV6))
		return NEXT;
	struct ipv6hdr ip;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof(ip)))
		return NEXT;
	// The kernel's NAT translates the flow with the extension headers in
	// place (it finds the transport header the same way); the program only
	// needs the ports.
	__u8 proto = ip.nexthdr;
	__u32 off = ETH_HLEN + sizeof(ip);
	skip_ext6(skb, &proto, &off);
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return NEXT;
	__u32 l3len = off - ETH_HLEN;
	if (bpf_ntohs(ip.payload_len) + sizeof(ip) < l3len)
		return NEXT;
	struct flow f = {.proto = proto, .v6 = 1, .l3len = l3len, .l4off = off};
	__builtin_memcpy(f.saddr, &ip.saddr, 16);
	__builtin_memcpy(f.daddr, &ip.daddr, 16);
	f.payload = bpf_ntohs(ip.payload_len) + sizeof(ip) - l3len;
	if (ports(skb, &f))
		return NEXT;
	struct bpf_sock_tuple tup = {};
	__builtin_memcpy(tup.ipv6.saddr, f.saddr, 16);
	__builtin_memcpy(tup.ipv6.daddr, f.daddr, 16);
	tup.ipv6.sport = f.sport;
	tup.ipv6.dport = f.dport;
	return nat(skb, &f, &tup, sizeof(tup.ipv6));
}
