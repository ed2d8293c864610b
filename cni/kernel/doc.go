// Package kernel is the CNI plugin's kernel work: links (the bridge, veth
// pairs, bridge ports), addresses, routes and sysctls of the node and of a
// pod's network namespace, through rtnetlink messages it writes itself on
// internal/nlmsg. It decides nothing: what to create, name, tolerate or
// roll back is package cni's; this package says how the kernel is asked.
//
// It writes its rtnetlink messages itself rather than linking the netlink
// library: that library (and package net, which it brings along) added
// about 0.1 ms to the start of every plugin process, for a dozen message
// types that take a page to write. Requests that do not depend on each
// other's answers go out in one write (Batch): the netlink library would
// send each on its own and wait for its answer, and a pod's ADD is a
// dozen requests.
//
// A Conn works in the network namespace it was opened in. The node's side
// is the calling thread's namespace (Dial); the pod's side is reached
// through a socket opened inside the pod's namespace (NetNS.Dial, from a
// thread internal/netnsutil switches in for that moment), so no thread
// stays switched into it. PrepareNetNS opens that socket before the
// command runs, during the binary's package initialization, where
// switching the main thread needs no runtime.LockOSThread — whose first
// call in a process starts an extra OS thread, a tenth of a millisecond of
// a command that lasts one or two.
package kernel
