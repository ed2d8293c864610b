package cni

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

var (
	// errNSNotExist: CNI_NETNS names nothing (the pod's namespace is gone).
	errNSNotExist = errors.New("no such network namespace")
	// errNotNS: CNI_NETNS names something that is not a namespace (a bind
	// mount that outlived its namespace reads as an ordinary file).
	errNotNS = errors.New("not a network namespace")
)

// netNS is an open network namespace file.
type netNS struct {
	fd   int
	path string
	// rtnl is a route netlink socket inside the namespace that PreparePod
	// opened ahead of the command; the first rtnlSocket call takes it.
	rtnl *rtnlConn
}

// openNetNS opens a network namespace by path (/run/netns/x,
// /proc/<pid>/ns/net).
func openNetNS(path string) (*netNS, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%s: %w", path, errNSNotExist)
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
		return nil, fmt.Errorf("%s: %w", path, errNotNS)
	}
	return &netNS{fd: fd, path: path}, nil
}

func (n *netNS) Fd() uintptr  { return uintptr(n.fd) }
func (n *netNS) Path() string { return n.path }

// Close closes the namespace file and a prepared socket nobody took.
func (n *netNS) Close() {
	if n.rtnl != nil {
		n.rtnl.Close()
		n.rtnl = nil
	}
	unix.Close(n.fd)
}

// Do runs fn on the calling thread switched into the namespace.
func (n *netNS) Do(fn func() error) error { return inNetns(n.fd, fn) }

// PreparedPod is a pod namespace, and a route netlink socket inside it,
// that the binary opened before the command ran (see PreparePod).
type PreparedPod struct{ ns *netNS }

// PreparePod opens the pod's namespace and a route netlink socket in it by
// switching the calling thread into the namespace and back, without
// runtime.LockOSThread: the first LockOSThread of a process starts an
// extra OS thread (the runtime's "template thread"), a tenth of a
// millisecond of a command that lasts one or two. That is only safe where
// the goroutine cannot move to another thread meanwhile: the binary calls
// it during package initialization, when the runtime keeps the main
// goroutine on the main thread.
//
// A namespace that cannot be opened yields nil and no error; the command
// then runs into the problem itself and reports it as usual. The error is
// for a thread that could not switch back: the process must not go on.
func PreparePod(path string) (*PreparedPod, error) {
	if path == "" {
		return nil, nil
	}
	pod, err := openNetNS(path)
	if err != nil {
		return nil, nil
	}
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &PreparedPod{ns: pod}, nil
	}
	defer unix.Close(self)
	if err := unix.Setns(pod.fd, unix.CLONE_NEWNET); err != nil {
		return &PreparedPod{ns: pod}, nil
	}
	pod.rtnl, _ = newRtnlConn()
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("return to the node's network namespace: %w", err)
	}
	return &PreparedPod{ns: pod}, nil
}

// openPod opens the pod namespace at path, or hands out the prepared one
// (once).
func (p *Plugin) openPod(path string) (*netNS, error) {
	if pp := p.Prepared; pp != nil && pp.ns != nil && pp.ns.path == path {
		ns := pp.ns
		pp.ns = nil
		return ns, nil
	}
	return openNetNS(path)
}

// sameNetNS reports whether path is the calling thread's own network
// namespace, which a runtime must never hand a plugin as the pod's.
func sameNetNS(path string) bool {
	var pod, self unix.Stat_t
	if unix.Stat(path, &pod) != nil || unix.Stat("/proc/thread-self/ns/net", &self) != nil {
		return false
	}
	return pod.Dev == self.Dev && pod.Ino == self.Ino
}

// sysctl reads a /proc/sys value (name with slashes) of the calling
// thread's namespace, without the runtime poller os.ReadFile would
// register the file with.
func sysctl(name string) (string, error) {
	fd, err := unix.Open("/proc/sys/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	defer unix.Close(fd)
	var buf [64]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// setSysctl writes a /proc/sys value of the calling thread's namespace.
func setSysctl(name, value string) error {
	fd, err := unix.Open("/proc/sys/"+name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(value)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
