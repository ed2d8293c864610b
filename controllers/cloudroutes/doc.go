// Package cloudroutes is nodenet's cloud route controller, after the route
// controller of the cloud-controller-manager (the seed is ACK's): it keeps
// one route per node podCIDR, "podCIDR via the node's InternalIP", in a
// routing table that plays the VPC router — on a local cluster the main
// table of the "vpc" namespace — and then marks the node's network as
// available (NetworkUnavailable=False, reason RouteCreated).
//
// The controller reconciles the whole table at once under a single queue
// key: node changes only nudge it, and so does an optional Watcher (the
// table's netlink route subscription) when a route changes in the kernel,
// so a route deleted by hand is back within a sync. A periodic resync is
// the bound for drift no notice reports (a lost notice, a route the
// kernel flushes silently). A route put back is a "repair" in the
// metrics (metrics.go), with its latency from the kernel's notice when
// there was one. It manages only routes it owns
// (routes.Table's protocol) whose destination lies inside the cluster
// CIDRs; anything else in the table is left alone. Its state is the
// kernel's, listed afresh on every sync, so a restart needs no memory.
package cloudroutes
