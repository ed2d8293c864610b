// Package iptables is nodenet's iptables data plane: it implements
// proxy.DataPlane by writing one `iptables-restore --noflush --wait` batch
// per sync (nat + filter tables), rewriting only the chains of the services
// that changed and keeping everything else in place.
//
// All chains start with "NODENET-" so they never collide with kube-proxy's
// KUBE-* or flannel's FLANNEL-* chains. Fixed chains:
//
//	nat    NODENET-SERVICES    (from PREROUTING, OUTPUT) VIP → per-service chain
//	nat    NODENET-NODEPORTS   NodePort → NODENET-EXT-*
//	nat    NODENET-MARK-MASQ   sets the 0x4000 masquerade mark
//	nat    NODENET-POSTROUTING (from POSTROUTING) masquerades marked packets
//	filter NODENET-SERVICES    (INPUT/FORWARD/OUTPUT, ctstate NEW) REJECT
//	                           for services without endpoints
//	filter NODENET-FIREWALL    drops LB traffic outside loadBalancerSourceRanges
//	filter NODENET-FORWARD     (FORWARD) accepts marked/established traffic
//
// Per service port (names hashed from the port name, ≤ 28 chars):
// NODENET-SVC-* (cluster endpoints), NODENET-SVL-* (local endpoints),
// NODENET-EXT-* (external entry), NODENET-FW-* (source ranges). Endpoints
// are inlined in SVC/SVL (hairpin mark, then statistic + DNAT; affinity
// through `recent` lists named NODENET-AFF-*) instead of kube-proxy's
// per-endpoint chains: iptables-nft-restore slows down quadratically with
// the number of chains, so one chain per service port instead of three
// makes full syncs at 10,000 services tens of times faster.
//
// Rules are written in the canonical form iptables-save prints, so golden
// files, the stateful Fake and the real kernel agree byte for byte; the same
// contract test runs against the Fake and against iptables in a throwaway
// namespace. The binaries, the choice of iptables-nft or iptables-legacy,
// restore batching, the Fake and error classification live in
// internal/iptables, shared with flanneld's and the CNI plugin's
// masquerading so that every component programs the same backend.
//
// Intact checks canary rules; with iptables-nft, WatchChanges (through
// proxy/nfwatch) has the core check them as soon as anything in the nat or
// filter table is deleted (SetNetns names the namespace when the runner's
// commands run elsewhere). iptables-legacy announces nothing: the core's
// periodic check is its only one.
package iptables
