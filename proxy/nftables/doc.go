// Package nftables is nodenet's nftables data plane: it implements
// proxy.DataPlane with one table per family (`ip nodenet-proxy`,
// `ip6 nodenet-proxy`). Syncs are written through the nft CLI (`nft -f -`,
// one transaction per sync), except endpoint changes: element changes and
// rewritten service/local chain rules go straight to nf_tables over a
// long-lived netlink socket (netlink.go, ruleenc.go, on internal/nlmsg)
// that the ExecRunner owns and its Close releases. Runner abstracts both;
// ExecRunner's Netns places them in a test namespace.
//
// Chains are fixed; what changes lives in maps:
//
//	nat-prerouting / nat-output   → services:
//	    ip daddr . meta l4proto . th dport vmap @service-ips
//	    fib daddr type local … meta l4proto . th dport vmap @service-nodeports
//	nat-postrouting               → masquerading: hairpin (ct status dnat,
//	                                saddr . daddr in @hairpin-endpoints), then
//	                                mark 0x4000 → masquerade
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
// firewall-* (loadBalancerSourceRanges).
//
// Load balancing (see writer.balance) is one rule per service/local chain:
//
//	meta l4proto tcp dnat ip to numgen random mod K offset B map @endpoints-tcp-S
//
// where the data map holds B … B+K-1 → endpoint address . port. B is the
// chain's block of keys (blocks), S its shard. Replacing an endpoint is
// therefore a pure element change: no chain is re-validated by the kernel
// and the nft CLI, which reads the whole table before every transaction,
// is not involved. A change in the endpoint count rewrites that one rule,
// still over netlink (the kernel then re-validates the chains). Services with ClientIP affinity (or more endpoints than
// a block holds) keep one endpoint-* chain per endpoint and one dynamic
// affinity-* set per endpoint, chosen by `numgen random mod K 0 goto …`
// rules (an anonymous `numgen … vmap { … }` would make the kernel name one
// anonymous set per service by scanning all sets: 71 s instead of 4 s at
// 10,000 services).
//
// Kernel costs that shaped this (kernel 6.18, measured at 10,000
// services): a rule with a jump/goto/dnat or a verdict element makes the
// commit re-validate every chain (57–99 ms); sets are found by name in a
// list (10,000 per-service maps: 12 s full sync); a data element is checked
// against every rule bound to its map and binding a rule walks every
// element (one shared map: 3.3 s, hence 64 shards per protocol); closing a
// netlink socket that committed waits for an RCU grace period and the next
// commit waits for it (10–15 ms, hence the long-lived socket).
//
// A full sync declares everything, flushes the table's rules and the fixed
// maps, re-creates the endpoint maps, rewrites them and deletes chains and
// sets nobody wants any more — one transaction, the table itself stays (a
// restart keeps conntrack and affinity state). A partial sync touches only
// the changed services' ports: new chains/sets added, changed chains
// flushed and refilled, map elements deleted/added by difference, shared
// elements (hairpin) and shared sets (endpoint map shards) reference-
// counted, stale chains flushed and deleted after the elements and rules
// pointing at them — again one transaction.
//
// Rules are written in the canonical form `nft list` prints back, so golden
// files, the stateful Fake and the kernel agree; the same contract test runs
// against Fake and against the kernel in a throwaway namespace.
//
// Intact counts the services chain's rules; WatchChanges (through
// proxy/nfwatch, in ExecRunner's Netns) has the core check it as soon as
// anything in the table is deleted.
package nftables
