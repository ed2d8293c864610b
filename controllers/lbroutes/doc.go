// Package lbroutes makes LoadBalancer Service IPs reachable from outside
// the nodes the way a cloud load balancer does: the VPC router — a routing
// table, on the local cluster the main table of the "vpc" namespace that
// holds the node network — gets one host route per address,
// "<lb-ip>/32 via <node InternalIP>". The node's proxy captures the address
// itself (the loadbalancer controller publishes it with ipMode VIP) and
// forwards to an endpoint, as for a NodePort.
//
// Why routes and not ARP: MetalLB's L2 mode has a speaker on a node answer
// ARP for the address, which needs a daemon on every node and a leader per
// address; a cloud's VPC router (or a BGP peer) instead holds a route per
// address to a node. Here the controller manager already sits at the VPC
// router, so a route is the whole mechanism, and it works for addresses
// inside the node network (the /32 beats the connected /24) and outside
// it alike.
//
// Which node: a Ready node with an InternalIP of the address's family that
// is not labelled node.kubernetes.io/exclude-from-external-load-balancers;
// for externalTrafficPolicy Local only nodes with a ready endpoint of the
// Service (what a cloud load balancer's health check against
// healthCheckNodePort finds out), since other nodes drop such traffic.
// Among those, rendezvous hashing of (address, node) picks one: stable
// across restarts and controller copies, spread over the nodes, and an
// address moves only when its node stops qualifying. One node per address
// (no ECMP) is what routes.Table expresses; a node that fails is replaced
// once the node lifecycle controller marks it not Ready.
//
// The controller reconciles the whole table at once under one queue key
// and resyncs periodically, so a route deleted by hand comes back. It owns
// only routes with its protocol whose destination lies inside the pools
// (--lb-ip-pool); it never touches other routes, including the cloud route
// controller's podCIDR routes in the same table.
package lbroutes
