// conntrack.h: the conntrack kfuncs (net/netfilter/nf_conntrack_bpf.c) that
// more than one of nodenet's BPF programs calls: the proxy's TCX NAT
// (proxy/ebpf/bpf/tcnat.c) and host routing's NAT test
// (routes/hostrouting/bpf/hostrouting.c). One copy, so the two cannot drift
// from each other or from the kernel's argument layout.
//
// Include after <linux/bpf.h> and <bpf/bpf_helpers.h> (struct __sk_buff,
// struct bpf_sock_tuple, __ksym).
#ifndef NODENET_BPF_CONNTRACK_H
#define NODENET_BPF_CONNTRACK_H

// The entries are opaque here; the loader wants the struct defined (a
// forward declaration does not match the kernel's struct). Programs read
// fields through CO-RE flavors of their own (nf_conn___<suffix>).
struct nf_conn {
	int opaque;
};

// The kfuncs' options, laid out as the kernel's struct bpf_ct_opts (its
// size is passed with each call and checked).
struct bpf_ct_opts {
	__s32 netns_id;
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u16 ct_zone_id;
	__u8 ct_zone_dir;
	__u8 reserved[3];
};

// netns_id: the network namespace the program runs in.
#define BPF_F_CURRENT_NETNS (-1)

extern struct nf_conn *bpf_skb_ct_lookup(struct __sk_buff *, struct bpf_sock_tuple *, __u32, struct bpf_ct_opts *,
					 __u32) __ksym;
extern void bpf_ct_release(struct nf_conn *) __ksym;

#endif
