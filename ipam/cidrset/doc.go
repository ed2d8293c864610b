// Package cidrset hands out fixed-size subnets (node podCIDRs) from one
// cluster CIDR, e.g. /24s out of 10.244.0.0/16 or /64s out of a /48.
//
// A Set is a bitmap with one bit per subnet and a next-fit cursor: each
// allocation starts scanning where the previous one stopped, so a CIDR that
// was just released is the last one handed out again. That gives other
// nodes time to drop routes to a deleted node's subnet before it is reused.
//
// A Set holds no state of its own worth persisting: its owner rebuilds it
// on start by Occupying every subnet that is already assigned (for node
// IPAM, every node's spec.podCIDRs) before it Allocates anything.
package cidrset
