package netnsutil

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// threadSelf is the calling thread's own namespace file. /proc/self would
// name the main thread's, which is not the thread being switched.
const threadSelf = "/proc/thread-self/ns/net"

// ErrNotNamespace is returned by Open (and so by Do) for a file that is not
// a network namespace, typically a bind mount that outlived its namespace
// and now reads as an ordinary empty file.
var ErrNotNamespace = errors.New("not a network namespace")

// Namespace is an open network namespace file. Holding it open keeps the
// namespace alive even if its name is deleted.
type Namespace struct {
	fd   int
	path string
}

// Open opens the network namespace at path (a path, not a name; see Path).
// A missing file yields an error matching fs.ErrNotExist; a file that is
// not a network namespace yields one matching ErrNotNamespace.
func Open(path string) (*Namespace, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	if err := checkNetns(fd); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	return &Namespace{fd: fd, path: path}, nil
}

// checkNetns tells a namespace file from anything else: namespace files
// live on nsfs (on procfs before Linux 3.19), and NS_GET_NSTYPE (Linux
// 4.11) tells a network namespace from, say, a mount namespace.
func checkNetns(fd int) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	switch st.Type {
	case unix.NSFS_MAGIC:
		typ, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
		if errors.Is(err, unix.ENOTTY) {
			return nil // a kernel older than the ioctl: nsfs is all we know
		}
		if err != nil {
			return fmt.Errorf("namespace type: %w", err)
		}
		if typ != unix.CLONE_NEWNET {
			return ErrNotNamespace
		}
		return nil
	case unix.PROC_SUPER_MAGIC:
		return nil
	}
	return ErrNotNamespace
}

// Fd is the open namespace file, valid until Close, for APIs that take one
// (netlink's NsFd, setns).
func (n *Namespace) Fd() int { return n.fd }

// Path is the path it was opened by.
func (n *Namespace) Path() string { return n.path }

// Close closes the file; the namespace lives on while anything else
// (a mount, a process, a socket) holds it.
func (n *Namespace) Close() error {
	if n.fd < 0 {
		return nil
	}
	err := unix.Close(n.fd)
	n.fd = -1
	if err != nil {
		return fmt.Errorf("close netns %s: %w", n.path, err)
	}
	return nil
}

// Do runs fn on a thread switched into the namespace; see the package Do.
func (n *Namespace) Do(fn func() error) error {
	return onThread(func() error {
		if err := setns(n.fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter netns %s: %w", n.path, err)
		}
		return nil
	}, fn)
}

// Do runs fn on a thread switched into the network namespace at path.
// Sockets fn opens stay in that namespace after Do returns, and processes
// fn starts are born in it; goroutines fn starts run on other threads,
// outside it. fn runs on a goroutine of its own, locked to its thread, so
// it must report failure by returning an error (t.Fatal inside fn would
// end the wrong goroutine); a panic in fn is re-raised in the caller once
// the thread is back. If the thread cannot be switched back, that
// goroutine exits still locked and Go retires the thread: neither the
// caller, which is never locked or moved, nor any other goroutine ever runs
// in the wrong namespace.
func Do(path string, fn func() error) error {
	ns, err := Open(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	return ns.Do(fn)
}

// setns is a variable so tests can make moving a thread back fail.
var setns = unix.Setns

// onThread runs fn on a fresh goroutine locked to its thread after enter
// has moved the thread into another network namespace, then moves it back
// to where it started. enter must leave the thread where it was when it
// fails. If the thread cannot be moved back, the goroutine exits still
// locked, which makes the runtime retire the thread rather than reuse it.
func onThread(enter, fn func() error) error {
	type result struct {
		err      error
		panicked bool
		panicVal any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open(threadSelf, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("open the thread's own netns: %w", err)}
			return
		}
		defer unix.Close(orig)
		if err := enter(); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		var r result
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.panicked, r.panicVal = true, p
				}
			}()
			r.err = fn()
		}()
		if err := setns(orig, unix.CLONE_NEWNET); err != nil {
			r.err = errors.Join(r.err, fmt.Errorf("restore netns (thread retired): %w", err))
			done <- r
			return // still locked: the runtime retires the thread
		}
		runtime.UnlockOSThread()
		done <- r
	}()
	r := <-done
	if r.panicked {
		panic(r.panicVal)
	}
	return r.err
}
