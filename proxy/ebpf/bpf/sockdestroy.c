//go:build ignore

// Closing connected UDP sockets whose backend went away (see ../doc.go,
// "Connected UDP"). A connected UDP socket that socket LB translated keeps
// its backend for life: no later syscall passes a destination the hooks
// could rewrite. When a backend leaves a UDP service, the Go side lists
// the {service, backend} pairs in `doomed` and runs this socket iterator
// in every network namespace whose sockets the programs translate; it
// destroys (bpf_sock_destroy, kernel >= 6.5: the application's next
// send/recv fails with ECONNABORTED, and a resolver then reconnects
// through the service) each connected UDP socket whose peer is a doomed
// backend *and* that reached it through that service (its reverse entry
// says so), so sockets that talk to a pod directly are left alone.
//
// No vmlinux.h: the few kernel fields read are declared below with
// preserve_access_index, and the loader relocates them against the running
// kernel's BTF.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char __license[] SEC("license") = "Dual MIT/GPL";

#define AF_INET 2
#define AF_INET6 10
#define TCP_ESTABLISHED 1 // a connected UDP socket's state

struct in6_addr {
	union {
		__u32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	__be32 skc_daddr;
	__be16 skc_dport;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct udp_sock;

struct bpf_iter_meta;

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct udp_sock *udp_sk;
} __attribute__((preserve_access_index));

extern int bpf_sock_destroy(struct sock_common *sk) __ksym;

// The same layouts as socklb.c's (the Go side checks both against one
// struct).
struct addrport {
	__u32 addr[4];
	__u16 port; // network byte order
	__u16 pad;
};

struct rev_key {
	__u64 cookie;
	struct addrport backend;
	__u32 pad;
};

// A backend that left a service: the service address the socket asked for
// and the backend it was sent to.
struct doomed_key {
	struct addrport vip;
	struct addrport backend;
};

// socklb.c's reverse map: the Go side hands the pinned one in.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rev_key);
	__type(value, struct addrport);
} reverse SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct doomed_key);
	__type(value, __u8);
} doomed SEC(".maps");

// Sockets destroyed by the last run (read and reset by the Go side).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} destroyed SEC(".maps");

// want_family is the family (AF_INET/AF_INET6) this data plane serves; set
// by the Go side before loading.
volatile const __u16 want_family = AF_INET;

SEC("iter/udp")
int destroy_udp(struct bpf_iter__udp *ctx)
{
	struct sock *sk = (struct sock *)ctx->udp_sk;
	if (!sk)
		return 0;
	if (sk->__sk_common.skc_state != TCP_ESTABLISHED || sk->__sk_common.skc_family != want_family)
		return 0;
	struct rev_key rk = {.cookie = bpf_get_socket_cookie(sk)};
	rk.backend.port = sk->__sk_common.skc_dport;
	if (want_family == AF_INET) {
		rk.backend.addr[0] = sk->__sk_common.skc_daddr;
	} else {
		rk.backend.addr[0] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[0];
		rk.backend.addr[1] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[1];
		rk.backend.addr[2] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[2];
		rk.backend.addr[3] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[3];
	}
	struct addrport *vip = bpf_map_lookup_elem(&reverse, &rk);
	if (!vip)
		return 0;
	struct doomed_key dk = {.vip = *vip, .backend = rk.backend};
	if (!bpf_map_lookup_elem(&doomed, &dk)) {
		// A wildcard NodePort's pairs carry the zero address: the socket
		// asked for one of the node's addresses, which the reverse entry
		// holds. (A ClusterIP or external address with the NodePort's
		// number and the same removed backend would match too: a socket
		// closed early, which the application survives by reconnecting.)
		__builtin_memset(dk.vip.addr, 0, sizeof(dk.vip.addr));
		if (!bpf_map_lookup_elem(&doomed, &dk))
			return 0;
	}
	if (bpf_sock_destroy((struct sock_common *)sk) == 0) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&destroyed, &zero);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return 0;
}
