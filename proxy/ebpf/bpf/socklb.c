//go:build ignore

// Socket-level load balancing for nodenet's ebpf data plane (see
// ../doc.go). The cgroup hooks below run when a socket in the attached
// cgroup connects to or sends to an address: if that address:port/proto is
// a service entry point, the destination is rewritten to one backend, once
// per connection (or per datagram for unconnected UDP). No packet is ever
// NATed, so there is no conntrack entry and no per-packet cost.
//
// Every map is per IP family: the Go side loads the *4 programs against one
// pinned set and the *6 programs against another. IPv4 addresses sit in
// addr[0]; the other words stay zero.

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

#include "lbmaps.h"

#define ECONNREFUSED 111

char __license[] SEC("license") = "Dual MIT/GPL";

// A socket's translated destination, so replies and getpeername show the
// address the application asked for.
struct rev_key {
	__u64 cookie; // socket cookie
	struct addrport backend;
	__u32 pad;
};

// Affinity is per network namespace: a socket has no source address yet when
// it connects, and one pod is one namespace, so "the same client IP" is
// "the same netns" for pods (host processes share the node's).
struct aff_key {
	__u64 netns; // netns cookie
	__u32 id;    // backend set of the service entry
	__u32 pad;
};

struct aff_value {
	__u64 used; // bpf_ktime_get_ns() of the last connect
	__u32 slot;
	__u32 pad;
	struct addrport backend; // checked on use: the slot may hold another one by now
	__u32 pad2;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rev_key);
	__type(value, struct addrport);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} reverse SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct aff_key);
	__type(value, struct aff_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} affinity SEC(".maps");

// sticky returns the backend the client's netns used last, if the entry has
// not timed out and the backend still holds its slot (removing a backend
// moves the last one into its slot).
static __always_inline struct addrport *sticky(struct bpf_sock_addr *ctx, const struct svc_value *svc, __u64 now,
					       __u32 *slot)
{
	struct aff_key ak = {.netns = bpf_get_netns_cookie(ctx), .id = svc->id};
	struct aff_value *av = bpf_map_lookup_elem(&affinity, &ak);
	if (!av || now - av->used > (__u64)svc->affinity * 1000000000ULL)
		return NULL;
	struct backend_key bk = {.id = svc->id, .slot = av->slot};
	struct addrport *be = bpf_map_lookup_elem(&backends, &bk);
	if (!be || !same_backend(be, &av->backend))
		return NULL;
	*slot = av->slot;
	return be;
}

// pick chooses the backend for one connection at random (or the sticky
// one). NULL means "leave the destination alone": the chosen slot and slot 0
// vanished under a concurrent update, so the service is being removed.
static __always_inline struct addrport *pick(struct bpf_sock_addr *ctx, const struct svc_value *svc)
{
	__u64 now = bpf_ktime_get_ns();
	struct addrport *be = NULL;
	__u32 slot = 0;
	if (svc->flags & SVC_AFFINITY)
		be = sticky(ctx, svc, now, &slot);
	if (!be) {
		// A shrinking set lowers count before deleting the tail, so a
		// slot past it can only be missing for an instant.
		struct backend_key bk = {.id = svc->id, .slot = bpf_get_prandom_u32() % svc->count};
		be = bpf_map_lookup_elem(&backends, &bk);
		slot = bk.slot;
		if (!be) {
			bk.slot = slot = 0;
			be = bpf_map_lookup_elem(&backends, &bk);
		}
		if (!be)
			return NULL;
	}
	if (svc->flags & SVC_AFFINITY) {
		struct aff_key ak = {.netns = bpf_get_netns_cookie(ctx), .id = svc->id};
		struct aff_value av = {.used = now, .slot = slot, .backend = *be};
		bpf_map_update_elem(&affinity, &ak, &av, BPF_ANY);
	}
	return be;
}

// Results of translate.
enum { PASS, REFUSE, REWRITE };

// translate looks key (address set by the caller) up. On REWRITE *out is the
// backend and the reverse entry for this socket is written with the
// address the socket asked for (a wildcard NodePort's too).
static __always_inline int translate(struct bpf_sock_addr *ctx, struct svc_key *key, struct addrport *out)
{
	key->port = (__u16)ctx->user_port;
	key->proto = (__u8)ctx->protocol;
	struct svc_key found;
	struct svc_value *svc = find_svc(key, &found);
	if (!svc)
		return PASS;
	// Every socket these hooks see is this node's (a pod's or the host's):
	// inside traffic, which the other modes send to the cluster-wide
	// endpoints of an eTP=Local entry point.
	if (svc->flags & SVC_INSIDE)
		svc = inside_of(&found, svc);
	if (svc->count == 0)
		return REFUSE;
	struct addrport *be = pick(ctx, svc);
	if (!be)
		return PASS;
	*out = *be;
	struct rev_key rk = {.cookie = bpf_get_socket_cookie(ctx), .backend = *be};
	struct addrport vip = {.port = key->port};
	__builtin_memcpy(vip.addr, key->addr, sizeof(vip.addr));
	bpf_map_update_elem(&reverse, &rk, &vip, BPF_ANY);
	return REWRITE;
}

// refuse makes the syscall fail with ECONNREFUSED: returning 0 alone would
// give EPERM, unlike the TCP reset a REJECT rule answers with.
static __always_inline int refuse(void)
{
	bpf_set_retval(-ECONNREFUSED);
	return 0;
}

static __always_inline int lb4(struct bpf_sock_addr *ctx)
{
	struct svc_key key = {.addr = {ctx->user_ip4}};
	struct addrport be;
	switch (translate(ctx, &key, &be)) {
	case REFUSE:
		return refuse();
	case REWRITE:
		ctx->user_ip4 = be.addr[0];
		ctx->user_port = be.port;
	}
	return 1;
}

static __always_inline int lb6(struct bpf_sock_addr *ctx)
{
	struct svc_key key = {.addr = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]}};
	struct addrport be;
	switch (translate(ctx, &key, &be)) {
	case REFUSE:
		return refuse();
	case REWRITE:
		ctx->user_ip6[0] = be.addr[0];
		ctx->user_ip6[1] = be.addr[1];
		ctx->user_ip6[2] = be.addr[2];
		ctx->user_ip6[3] = be.addr[3];
		ctx->user_port = be.port;
	}
	return 1;
}

// reverse4/6 show a translated peer (a datagram's source, getpeername) as
// the service address the socket asked for. These hooks must return 1.
static __always_inline void reverse4(struct bpf_sock_addr *ctx)
{
	struct rev_key rk = {.cookie = bpf_get_socket_cookie(ctx),
			     .backend = {.addr = {ctx->user_ip4}, .port = (__u16)ctx->user_port}};
	struct addrport *vip = bpf_map_lookup_elem(&reverse, &rk);
	if (!vip)
		return;
	ctx->user_ip4 = vip->addr[0];
	ctx->user_port = vip->port;
}

static __always_inline void reverse6(struct bpf_sock_addr *ctx)
{
	struct rev_key rk = {.cookie = bpf_get_socket_cookie(ctx),
			     .backend = {.addr = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]},
					 .port = (__u16)ctx->user_port}};
	struct addrport *vip = bpf_map_lookup_elem(&reverse, &rk);
	if (!vip)
		return;
	ctx->user_ip6[0] = vip->addr[0];
	ctx->user_ip6[1] = vip->addr[1];
	ctx->user_ip6[2] = vip->addr[2];
	ctx->user_ip6[3] = vip->addr[3];
	ctx->user_port = vip->port;
}

SEC("cgroup/connect4")
int connect4(struct bpf_sock_addr *ctx) { return lb4(ctx); }

SEC("cgroup/sendmsg4")
int sendmsg4(struct bpf_sock_addr *ctx) { return lb4(ctx); }

SEC("cgroup/recvmsg4")
int recvmsg4(struct bpf_sock_addr *ctx) { reverse4(ctx); return 1; }

SEC("cgroup/getpeername4")
int getpeername4(struct bpf_sock_addr *ctx) { reverse4(ctx); return 1; }

SEC("cgroup/connect6")
int connect6(struct bpf_sock_addr *ctx) { return lb6(ctx); }

SEC("cgroup/sendmsg6")
int sendmsg6(struct bpf_sock_addr *ctx) { return lb6(ctx); }

SEC("cgroup/recvmsg6")
int recvmsg6(struct bpf_sock_addr *ctx) { reverse6(ctx); return 1; }

SEC("cgroup/getpeername6")
int getpeername6(struct bpf_sock_addr *ctx) { reverse6(ctx); return 1; }
