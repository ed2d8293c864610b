// Package nftables is nodenet's nftables data plane: it implements
// proxy.DataPlane with one table per family (`ip nodenet-proxy`,
// `ip6 nodenet-proxy`) written through the nft CLI (`nft -f -`, one
// transaction per sync; Runner abstracts it, ExecRunner's Prefix such as
// "ip netns exec NS" places it in a test namespace).
//
// Chains are fixed; what changes lives in maps:
//
//	nat-prerouting / nat-output   → services:
//	    ip daddr . meta l4proto . th dport vmap @service-ips
//	    fib daddr type local … meta l4proto . th dport vmap @service-nodeports
//	nat-postrouting               → masquerading (mark 0x4000 → masquerade)
//	filter-prerouting / filter-output-firewall (before DNAT)
//	                              → firewall-check: vmap @firewall-ips
//	filter-input / -forward / -output (after DNAT, ct state new)
//	                              → service-endpoints-check: vmap @no-endpoint-services
//	                              → nodeport-endpoints-check: vmap @no-endpoint-nodeports
//	                                (both → reject-chain: tcp reset / port unreachable)
//
// Per service port (names "<kind>-<hash>-<ns>/<name>/<proto>/<port>"):
// service-* (Cluster-policy endpoints), local-* (Local-policy endpoints),
// external-* (NodePort/external IP/LB entry: masquerade or eTP Local),
// firewall-* (loadBalancerSourceRanges), one endpoint-* chain per endpoint
// (hairpin mark + DNAT) and, with ClientIP affinity, one affinity-* set
// (dynamic, with timeout) per endpoint. Load balancing is one
// `numgen random mod K 0 goto endpoint-…` rule per endpoint (K = endpoints
// left), not an anonymous `numgen … vmap { … }`: the kernel names every
// anonymous set by scanning all sets of the table, which made a 10,000
// service load take 71 s instead of 4 s.
//
// A full sync declares everything, flushes the table's rules and the fixed
// maps, rewrites them and deletes chains and sets nobody wants any more —
// one transaction, the table itself stays (a restart keeps conntrack and
// affinity state). A partial sync touches only the changed services: new
// chains/sets added, changed chains flushed and refilled, map elements
// deleted/added by difference, stale chains flushed and deleted after the
// elements and rules pointing at them — again one transaction.
//
// Rules are written in the canonical form `nft list` prints back, so golden
// files, the stateful Fake and the kernel agree; the same contract test runs
// against Fake and against nft in a throwaway namespace.
package nftables
