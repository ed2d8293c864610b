package kernel

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

var (
	// ErrNoNetNS: the path names nothing (the pod's namespace is gone).
	ErrNoNetNS = errors.New("no such network namespace")
	// ErrNotNetNS: the path names something that is not a namespace (a
	// bind mount that outlived its namespace reads as an ordinary file).
	ErrNotNetNS = errors.New("not a network namespace")
)

// NetNS is an open network namespace file.
type NetNS struct {
	fd   int
	path string
	// prepared is a route netlink socket inside the namespace that
	// PrepareNetNS opened ahead of the command; the first Dial takes it.
	prepared *Conn
}

// OpenNetNS opens a network namespace by path (/run/netns/x,
// /proc/<pid>/ns/net). It checks the file system the file lives on (nsfs,
// or proc for /proc/<pid>/ns/net), so a stale bind mount is ErrNotNetNS
// rather than a namespace a veth could be moved into.
func OpenNetNS(path string) (*NetNS, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%s: %w", path, ErrNoNetNS)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Type != unix.NSFS_MAGIC && st.Type != unix.PROC_SUPER_MAGIC {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", path, ErrNotNetNS)
	}
	return &NetNS{fd: fd, path: path}, nil
}

// Path is the path the namespace was opened by.
func (n *NetNS) Path() string { return n.path }

// Prepared reports whether a socket PrepareNetNS opened is still waiting
// for Dial.
func (n *NetNS) Prepared() bool { return n.prepared != nil }

// Close closes the namespace file and a prepared socket nobody took.
func (n *NetNS) Close() {
	if n.prepared != nil {
		n.prepared.Close()
		n.prepared = nil
	}
	unix.Close(n.fd)
}

// Dial opens a route netlink socket inside the namespace: the one
// PrepareNetNS opened (once), else a new one, opened from a thread
// switched into the namespace for that moment.
func (n *NetNS) Dial() (*Conn, error) {
	if c := n.prepared; c != nil {
		n.prepared = nil
		return c, nil
	}
	var c *Conn
	err := n.Do(func() (err error) {
		c, err = Dial()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open netlink in %s: %w", n.path, err)
	}
	return c, nil
}

// Do runs fn on a thread switched into the namespace (internal/netnsutil:
// a goroutine of its own, locked to its thread, which Go retires if it
// cannot switch back).
func (n *NetNS) Do(fn func() error) error { return netnsutil.Do(n.path, fn) }

// PrepareNetNS opens the namespace at path and a route netlink socket in
// it (for Dial) by switching the calling thread into the namespace and
// back, without runtime.LockOSThread: the first LockOSThread of a process
// starts an extra OS thread (the runtime's "template thread"), a tenth of
// a millisecond of a CNI command that lasts one or two. That is only safe
// where the goroutine cannot move to another thread meanwhile: the binary
// calls it during package initialization, when the runtime keeps the main
// goroutine on the main thread.
//
// This is the one namespace switch that does not go through
// internal/netnsutil, and cannot: netnsutil.Do runs fn on a goroutine of
// its own locked to its thread, which is exactly the LockOSThread (and
// the thread) this saves, and it cannot switch the calling thread, which
// is the only one guaranteed during package initialization.
//
// A namespace that cannot be opened yields nil and no error, and one the
// thread cannot enter yields a NetNS without a prepared socket: the
// command then runs into the problem itself and reports it as usual. The
// error is for a thread that could not switch back: the process must not
// go on.
func PrepareNetNS(path string) (*NetNS, error) {
	if path == "" {
		return nil, nil
	}
	ns, err := OpenNetNS(path)
	if err != nil {
		return nil, nil
	}
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ns, nil
	}
	defer unix.Close(self)
	if err := unix.Setns(ns.fd, unix.CLONE_NEWNET); err != nil {
		return ns, nil
	}
	ns.prepared, _ = Dial()
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("return to the node's network namespace: %w", err)
	}
	return ns, nil
}

// DisableDAD stops duplicate address detection on interface ifName inside
// the namespace. Addresses added through AddAddr or a Batch skip DAD
// anyway; this covers the rest (the link-local one). There is no netlink
// request for it: the thread switches into the namespace for the write.
func (n *NetNS) DisableDAD(ifName string) error {
	return n.Do(func() error {
		if err := SetSysctl("net/ipv6/conf/"+ifName+"/accept_dad", "0"); err != nil {
			return fmt.Errorf("disable DAD on %s: %w", ifName, err)
		}
		return nil
	})
}
