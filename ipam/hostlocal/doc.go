// Package hostlocal allocates pod IP addresses on one node, in-process, in
// the on-disk format of the CNI reference plugin host-local:
//
//	<dataDir>/<network>/<ip>                 "<containerID>\r\n<ifname>"
//	<dataDir>/<network>/last_reserved_ip.<N> the round-robin cursor of range set N
//	<dataDir>/<network>/lock                 flock'ed around every change
//
// Sharing the format and the lock means a node can switch between nodenet
// and bridge + host-local in either direction without losing or doubling an
// allocation, and that both can run side by side on one directory.
//
// Reservations are claimed under the lock with O_EXCL (or a rename that
// does not replace, see below), so two processes never hand out one
// address, and a process killed at any point leaves at worst a reservation
// (possibly empty) that blocks its address until GC, fed the runtime's
// list of live attachments, releases it.
//
// Released files are renamed to ".free-*" spares (at most 64) and renamed
// back into place for the next reservation: allocating an inode is by far
// the most expensive step of an allocation on some file systems, and
// host-local ignores files whose name is not an address.
//
// Nothing is fsynced, deliberately: the page cache survives any process
// crash, and a reservation only means something while its pod's network
// namespace exists, which no kernel crash or power loss survives. A
// reservation lost that way belonged to a dead pod; one that survives is
// the reboot leak GC exists for. Syncing would buy nothing and cost two
// disk flushes per pod.
package hostlocal
