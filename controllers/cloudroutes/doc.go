// Package cloudroutes is nodenet's cloud route controller, after the route
// controller of the cloud-controller-manager (the seed is ACK's): it keeps
// one route per node podCIDR, "podCIDR via the node's InternalIP", in a
// routing table that plays the VPC router — on a local cluster the main
// table of the "vpc" namespace — and then marks the node's network as
// available (NetworkUnavailable=False, reason RouteCreated).
//
// The controller reconciles the whole table at once under a single queue
// key: node changes only nudge it, and a periodic resync repairs drift in
// the kernel (a route deleted by hand). It manages only routes it owns
// (routes.Table's protocol) whose destination lies inside the cluster
// CIDRs; anything else in the table is left alone. Its state is the
// kernel's, listed afresh on every sync, so a restart needs no memory.
package cloudroutes
