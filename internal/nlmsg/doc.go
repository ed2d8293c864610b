// Package nlmsg writes netlink messages and runs the exchange with the
// kernel that every netlink user needs: one write carrying one or more
// messages, then reading the answers — several per datagram, several
// datagrams per dump — matching them to the messages by sequence number,
// and turning the kernel's NLMSG_ERROR answers into errors.
//
// It knows netlink's framing (the message header, attributes, nested
// attributes, 4-byte alignment) but no message family: rtnetlink
// (cni/kernel) and nf_tables (proxy/nftables) put their own fixed headers
// and attribute numbers in.
//
// It depends only on the standard library and golang.org/x/sys/unix, not
// even on package net, because the CNI plugin links it and a plugin
// process lives for one command: every package it links adds to the
// start-up of every pod's network. Sockets are blocking and read without
// the runtime's poller for the same reason (an answer then costs one
// system call, not a park, an epoll wait and a wake-up).
package nlmsg
