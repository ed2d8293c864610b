// Package netnsutil is the one place that switches, creates, opens and
// removes network namespaces. Everything outside the CNI plugin's
// start-up trick goes through it: the node agent (pod namespaces), the
// local cluster (vpc and node namespaces), flanneld (a node namespace, its
// checksum self-test's private namespace), routes (netlink handles) and the
// test helpers in internal/nettest.
//
// A network namespace belongs to an OS thread, not to a goroutine, so the
// one rule is: only a goroutine of our own, locked to its thread, is ever
// switched. Do runs fn on such a goroutine and moves the thread back
// afterwards. If moving back fails, the goroutine exits still locked and
// the Go runtime retires the thread instead of handing a thread in a
// foreign namespace to unrelated goroutines. The caller's goroutine is
// never locked and never moved, so a failure cannot leave, say, a pod
// worker running inside a pod's namespace.
//
// Names and paths: an iproute2 name ("vpc") means a file under Dir, a
// string with a slash is a path (/proc/1234/ns/net); Path makes that
// decision, once, for every caller.
//
// Create makes what `ip netns add` makes (a bind mount under a shared Dir,
// so `ip netns list/exec` see it) and also brings loopback up, because
// every caller wants 127.0.0.1 to work; DoPrivate gives fn a fresh,
// unnamed namespace that disappears with the thread's last reference.
// Start forks a command from a switched thread, so the child is born in
// the namespace.
//
// The package depends only on the standard library (not package net) and
// golang.org/x/sys/unix, because the lean CNI binary links it: rtnetlink
// handles live in routes (routes.OpenHandle), and loopback is brought up
// with the SIOCSIFFLAGS ioctl rather than netlink.
package netnsutil
