// Package ipam is the home of nodenet's address allocators; the code lives
// in its subpackages:
//
//   - hostlocal: pod IPs on one node, in the on-disk format of the CNI
//     host-local plugin, used in-process by the nodenet-cni binary.
//   - cidrset: node podCIDRs carved out of the cluster CIDR, used by the
//     node IPAM controller.
package ipam
