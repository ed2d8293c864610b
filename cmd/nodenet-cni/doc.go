// Command nodenet-cni is the nodenet CNI plugin binary: the runtime execs it
// with CNI_* variables and the network configuration on stdin, and it
// prints the result (or a CNI error object) on stdout. Logs go to stderr.
// Install it as /opt/cni/bin/nodenet, or as /opt/cni/bin/flannel to serve
// an existing flannel conflist.
//
// Build it static, as the reference plugins are shipped:
//
//	CGO_ENABLED=0 go build -o /opt/cni/bin/nodenet ./cmd/nodenet-cni
//
// A cgo build links libc dynamically (package net), and the dynamic loader
// alone then costs about a millisecond per exec, a third of an ADD.
//
// A plugin process lives for one command, so its start-up is a good part
// of every ADD and DEL: the binary links neither the reference library's
// skel nor its result types (cni/protocol speaks the protocol), nor the
// netlink library (cni/kernel writes its own messages).
package main
