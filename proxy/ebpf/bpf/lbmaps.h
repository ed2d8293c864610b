// The service tables both nodenet BPF objects read: socklb.c (socket-level
// load balancing) and tcnat.c (the tc path) load these definitions and share
// the pinned maps by name, so one layout serves both (and the Go side's
// types, TestMapLayoutsMatchGoTypes). Include after linux/bpf.h and
// bpf/bpf_helpers.h.

#ifndef NODENET_LBMAPS_H
#define NODENET_LBMAPS_H

// Flags of struct svc_value.
#define SVC_AFFINITY 1    // sessionAffinity ClientIP: reuse the client's backend
#define SVC_KEEP_SOURCE 2 // externalTrafficPolicy Local: no SNAT, the backend sees the client (tc path)
#define SVC_SRC_RANGES 4  // loadBalancerSourceRanges: only sources in src_ranges[{id, *}] (tc path)
// An external entry point with externalTrafficPolicy Local whose traffic
// from inside the cluster (this node's sockets; pods' packets on the tc
// path) goes to the cluster-wide endpoints (kubernetes#71596): those are in
// the entry with the same address, port and protocol and scope
// SCOPE_INSIDE. Only flagged entries cost the second lookup.
#define SVC_INSIDE 8

// svc_key.scope: which traffic an entry serves, and how its address is
// matched (bits).
#define SCOPE_ANY 0    // every client (the only scope of most entries)
#define SCOPE_INSIDE 1 // clients inside the cluster, for entries with SVC_INSIDE
// A NodePort on every local address (no --nodeport-addresses): addr is
// zero, and the entry answers a destination that has no exact entry and is
// in local_addrs. A bit of its own, so no lookup of an exact destination
// (0.0.0.0 included, which connect() takes for "this host") can hit it.
#define SCOPE_WILDCARD 2

// src_ranges id holding the cluster CIDRs (tc path): entry point ids start
// at 1, so 0 is free.
#define CLUSTER_CIDRS_ID 0

struct svc_key {
	__u32 addr[4];
	__u16 port;  // network byte order
	__u8 proto;  // IPPROTO_TCP / IPPROTO_UDP
	__u8 scope;  // SCOPE_*
};

struct svc_value {
	__u32 id;       // backend set: backends[{id, 0..count-1}]
	__u32 count;    // 0: no usable endpoints, the connect is refused
	__u32 flags;    // SVC_*
	__u32 affinity; // affinity timeout in seconds (with SVC_AFFINITY)
};

struct backend_key {
	__u32 id;
	__u32 slot;
};

struct addrport {
	__u32 addr[4];
	__u16 port; // network byte order
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct svc_key);
	__type(value, struct svc_value);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 262144);
	__type(key, struct backend_key);
	__type(value, struct addrport);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backends SEC(".maps");

// The node namespace's own addresses (loopback excepted, as the nftables
// mode's `fib daddr type local ... daddr != 127.0.0.0/8`): where wildcard
// NodePorts answer. Kept by the Go side from the namespace's addresses and
// an address subscription, so an address added or removed takes effect
// without a services resync.
struct local_addr {
	__u32 addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, struct local_addr);
	__type(value, __u8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} local_addrs SEC(".maps");

// find_svc looks the entry point key (scope SCOPE_ANY) up: its exact
// entry, else, for a local destination, the port's wildcard NodePort.
// *found is the key that matched (for the inside lookup, inside_of).
static __always_inline struct svc_value *find_svc(const struct svc_key *key, struct svc_key *found)
{
	*found = *key;
	struct svc_value *svc = bpf_map_lookup_elem(&services, found);
	if (svc)
		return svc;
	struct local_addr la;
	__builtin_memcpy(la.addr, key->addr, sizeof(la.addr));
	if (!bpf_map_lookup_elem(&local_addrs, &la))
		return NULL;
	__builtin_memset(found->addr, 0, sizeof(found->addr));
	found->scope = SCOPE_WILDCARD;
	return bpf_map_lookup_elem(&services, found);
}

// inside_of is the inside entry of svc (found under *found), or svc itself
// if it has none.
static __always_inline struct svc_value *inside_of(struct svc_key *found, struct svc_value *svc)
{
	found->scope |= SCOPE_INSIDE;
	struct svc_value *inside = bpf_map_lookup_elem(&services, found);
	found->scope &= ~SCOPE_INSIDE;
	return inside ? inside : svc;
}

static __always_inline int same_backend(const struct addrport *a, const struct addrport *b)
{
	return a->addr[0] == b->addr[0] && a->addr[1] == b->addr[1] && a->addr[2] == b->addr[2] &&
	       a->addr[3] == b->addr[3] && a->port == b->port;
}

#endif
