// Package proxy is the data-plane-independent core of `nodenet proxy`, the
// kube-proxy peer: it watches Services, EndpointSlices and this Node, folds
// them into one Snapshot per IP family, and hands each snapshot plus the set
// of changed services to a DataPlane (proxy/iptables, proxy/nftables, ...)
// from a rate-limited sync runner. It imports no data plane; the
// --proxy-mode switch lives above it (proxy/app, cmd/nodenet).
//
// # The contract with data planes
//
// A data plane implements DataPlane for one Family:
//
//	Sync(ctx, snap *Snapshot, changed ChangeSet) (SyncResult, error)
//	Cleanup(ctx) error
//	Name() string
//
// Sync is called from one goroutine. snap is complete and read-only, and
// valid only during the call: every snapshot of a family shares one live
// map that the next build changes in place (a change then costs what it
// changes, not a copy of every service), while the *ServicePort values are
// never changed once built, so a data plane may keep those. snap.Services
// maps every programmable ServicePortName to a *ServicePort
// holding the VIPs (ClusterIP, ExternalIPs, LoadBalancerIPs, NodePort), the
// policies (ExternalPolicyLocal, InternalPolicyLocal, AffinityTimeout,
// LoadBalancerSourceRanges, TrafficDistribution) and both the raw Endpoints
// and the shared endpoint selection in ServicePort.Selected:
//
//	Selected.Cluster  endpoints for Cluster-policy traffic
//	Selected.Local    endpoints for Local-policy traffic (this node only)
//	Selected.InternalEndpoints(sp) / ExternalEndpoints(sp)
//	                  the list ClusterIP / external traffic uses
//	                  (empty list → REJECT: connection refused)
//
// Selection (SelectEndpoints) is done once, here, so every mode agrees:
// traffic policy first, then ready endpoints else serving+terminating
// (terminating fallback), then topology (hints, or zone/node for
// trafficDistribution PreferClose/PreferSameZone/PreferSameNode).
//
// changed.Full asks for a complete rewrite (first sync after start, periodic
// --sync-period resync, node/NodePort-address change, after a failed sync);
// otherwise only services in changed.Services need rewriting — a name in the
// set but missing from snap.Services was deleted. A sync must be one atomic
// kernel transaction and must not flush state that did not change, so the
// first sync after a restart converges without dropping connections.
//
// Masquerading uses MasqueradeMark (0x4000) for traffic from outside
// snap.ClusterCIDRs (or all traffic with snap.MasqueradeAll), for external
// traffic under the Cluster policy, and for hairpin traffic. NodePorts listen
// on snap.NodePorts (All local addresses, or the resolved
// --nodeport-addresses; see NodePortAddresses.Resolve).
//
// The SNAT keeps the client's source port where it is free, unlike
// kube-proxy's MASQUERADE --random-fully. A client that reuses a source
// port (netperf's TCP_CRR, any busy client wrapping its port range)
// reopens its flow's conntrack entry; a random port then lands on tuples
// the endpoint still holds in TIME_WAIT from other clients' connections,
// whose TCP timestamp offsets (per 4-tuple) differ, so PAWS refuses half of
// those SYNs and each waits for a retransmission: NodePort TCP_CRR
// collapsed from 7,000 to 200 connections/s on kind, in every data plane
// that randomised. Keeping the port maps the reopened flow onto its own old
// tuple, which the endpoint takes over. The kernel already starts the
// search for a free port at a random offset when the client's is taken.
// proxytest's SNATedClientReusingPortsIsNotStalled holds every mode to it.
//
// Conntrack cleanup and the healthCheckNodePort servers are done by the
// core after a successful Sync; data planes do not touch conntrack. The core
// deletes UDP flows a sync made stale (to removed endpoints), the flows of
// any protocol that no rule translated to the VIPs of a port that had no
// endpoints and has some now (a SYN that got past the rejects, through an
// ACCEPT ahead of them in FORWARD or before the sync), and, on every full
// sync, the flows of any protocol to a VIP with endpoints that no rule
// translated: they were created while the rules were missing (the full sync
// is the repair). Each would keep the client's 5-tuple untranslated.
//
// Bad input (unparseable IPs, port 0, unknown protocols) never reaches a
// data plane: ServicePortsFor / EndpointsFor skip it with errors wrapping
// ErrInvalid, which the core logs and counts.
//
// # Running it
//
// New builds a Proxy over one DataPlane per family; Run starts the informers
// (Services, EndpointSlices, this Node) and the bounded-frequency runner
// (MinSyncPeriod with a burst of SyncBurst, full resync every SyncPeriod,
// and a full sync whenever a data plane implementing IntegrityChecker finds
// its state gone, checked every IntegrityCheckPeriod and, for a data plane
// that is also a ChangeWatcher, within 100-500 ms of the kernel announcing
// a deletion: nftables and iptables-nft through proxy/nfwatch;
// iptables-legacy announces nothing); a data plane
// implementing Preparer has its start-up work run beside the informers'
// initial lists instead of in the first sync; SyncNow runs one sync
// directly (tests, benchmarks). HealthHandler serves
// /healthz and /livez with kube-proxy's JSON bodies and status codes, and
// /readyz; Metrics().Registry holds the Prometheus metrics, under
// kube-proxy's names (kubeproxy_*, v1.37) wherever kube-proxy has the
// same series, nodenet_proxy_* otherwise. proxy/app holds the --proxy-mode switch; proxy/proxytest is the
// real-kernel suite every data plane runs (KernelSuite: IPv4, IPv6 and a
// dual-stack Service through a dual-stack proxy; SwitchSuite: IPv4).
package proxy
