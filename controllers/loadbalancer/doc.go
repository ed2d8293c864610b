// Package loadbalancer gives Services of type LoadBalancer an external IP
// from configured pools, the job a cloud provider's service controller does
// on a cloud and MetalLB's controller does on bare metal.
//
// Only Services without spec.loadBalancerClass are handled: a class names
// another implementation, whose status we must not touch. Each such Service
// gets one address per family in spec.ipFamilies that has a pool, published
// as status.loadBalancer.ingress[].ip with ipMode VIP (the node proxies
// capture the address themselves; nothing in front of the nodes rewrites
// it). spec.loadBalancerIP, although deprecated upstream, is honoured when
// it is free and inside a pool, since on bare metal an operator often has
// to pin an address that DNS or a firewall already points at.
//
// The allocation table lives in memory and is rebuilt on start from the
// Services' status, oldest Service first, before any allocation is made; so
// a restart never moves an address, and when two Services publish the same
// address (two controller copies during a split brain) the older keeps it
// and the younger is given a new one. Announcing the addresses on the wire
// (ARP/NDP or BGP) is not this package's job.
package loadbalancer
