// Package nodeipam is the node IPAM controller: it gives every Node a pod
// CIDR (spec.podCIDR and spec.podCIDRs, one per IP family, primary family
// first) carved out of the cluster CIDR(s), and takes it back when the Node
// is deleted. flanneld, the CNI plugin and the route controller all start
// from that field.
//
// The controller keeps no state outside the API: on start it waits for the
// node informer to sync and occupies every CIDR a Node already holds before
// it hands out anything. An allocation is chosen in memory and then written
// with a PATCH; if the write fails the choice stays reserved in memory for
// the retry, and if the process dies in between the CIDR is simply free
// again on restart, because no Node holds it. The API server makes
// podCIDR(s) immutable once set, so a Node is never moved to another CIDR:
// when a write is refused the controller re-reads the Node and adopts
// whatever it holds.
//
// When a cluster CIDR is exhausted the Node gets a Warning Event
// (CIDRNotAvailable) and the condition NetworkUnavailable=True with reason
// NoCIDRAvailable, and is retried with backoff, and at once whenever a CIDR
// is released. Nodes that hold a CIDR this controller cannot account for
// (outside the cluster CIDR, of another size, or held by another Node too)
// are logged, get a Warning Event (InvalidPodCIDR) and are left alone.
//
// The controller does not elect a leader: run one instance per cluster, as
// with kube-controller-manager's --leader-elect.
package nodeipam
