package netnsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir holds the named namespaces. iproute2 says /var/run/netns, which is
// /run/netns on every distribution with /var/run a symlink to /run (all
// the systemd era); the agent, the cluster, the tests and containerd's
// pods then share one directory with `ip netns`.
const Dir = "/run/netns"

// Path resolves how callers name a namespace: "" stays "" (callers use it
// for "my own namespace"), a string with a slash is already a path (such
// as /proc/1234/ns/net), anything else is an iproute2 name under Dir.
func Path(ns string) string {
	if ns == "" || strings.Contains(ns, "/") {
		return ns
	}
	return filepath.Join(Dir, ns)
}

// Create makes the named namespace, as `ip netns add` does, with loopback
// up, and returns its path. A namespace already mounted under the name is
// reused as it is, so Create is idempotent; a plain file there (a mount
// point whose namespace is gone, or one a caller claimed with O_EXCL to
// reserve the name) is mounted over.
func Create(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	path := filepath.Join(Dir, name)
	unlock, err := lockDir()
	if err != nil {
		return "", fmt.Errorf("create netns %s: %w", name, err)
	}
	defer unlock()
	if ns, err := Open(path); err == nil {
		return path, ns.Close()
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0)
	if err != nil {
		return "", fmt.Errorf("create netns %s: %w", name, err)
	}
	f.Close()
	// The namespace is complete (loopback up) before the mount makes it
	// visible, so nobody ever finds it half made.
	err = onThread(unshare, func() error {
		if err := loopbackUp(); err != nil {
			return err
		}
		if err := unix.Mount(threadSelf, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", errors.Join(fmt.Errorf("create netns %s: %w", name, err), Delete(name))
	}
	return path, nil
}

// Delete removes the named namespace's name: unmount and remove the file.
// The namespace itself ends when nothing else holds it; processes still
// inside keep it alive, unharmed. A missing name is not an error.
func Delete(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	path := filepath.Join(Dir, name)
	// MNT_DETACH because a process whose mount namespace holds the mount
	// (an `ip netns exec` child, say) would make a plain unmount fail with
	// EBUSY. EINVAL: not a mount point (a bare placeholder file).
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete netns %s: unmount: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// List returns the names under Dir that start with prefix.
func List(prefix string) ([]string, error) {
	entries, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list netns: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// DoPrivate runs fn on a thread moved into a new, unnamed namespace with
// loopback up, like Do. Nothing is mounted, so the namespace never shows
// in `ip netns list` and ends when fn has returned and the sockets it
// opened are closed: no cleanup can be forgotten.
func DoPrivate(fn func() error) error {
	return onThread(unshare, func() error {
		if err := loopbackUp(); err != nil {
			return err
		}
		return fn()
	})
}

// Inode identifies a namespace: two namespace files (a name under Dir,
// /proc/<pid>/ns/net of a process inside) are the same namespace exactly
// when their Inodes are equal.
type Inode struct{ Dev, Ino uint64 }

// InodeOf identifies the namespace at path.
func InodeOf(path string) (Inode, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Inode{}, fmt.Errorf("stat netns %s: %w", path, err)
	}
	return Inode{Dev: st.Dev, Ino: st.Ino}, nil
}

// unshare moves the calling (locked) thread into a new namespace. It
// either fails with the thread unmoved or succeeds.
func unshare() error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("unshare netns: %w", err)
	}
	return nil
}

// loopbackUp sets lo up in the calling thread's namespace with the
// SIOCSIFFLAGS ioctl, which needs no netlink (see the package comment).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set lo up: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// lockDir prepares Dir the way iproute2 does, as a shared mount point, so
// namespaces mounted later also show up in mount namespaces cloned earlier
// (by `ip netns exec` or a container runtime), and holds an flock on it
// until unlock: two processes then neither stack the directory's own bind
// mounts nor mount two namespaces on one name.
func lockDir() (unlock func(), err error) {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return nil, err
	}
	fd, err := unix.Open(Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", Dir, err)
	}
	unlock = func() { unix.Close(fd) } // closing drops the flock
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unlock()
		return nil, fmt.Errorf("lock %s: %w", Dir, err)
	}
	err = unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet; make it one and retry.
		if err := unix.Mount(Dir, Dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			unlock()
			return nil, fmt.Errorf("bind mount %s: %w", Dir, err)
		}
		err = unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		unlock()
		return nil, fmt.Errorf("make %s shared: %w", Dir, err)
	}
	return unlock, nil
}

// checkName accepts iproute2 names only: Delete must never unmount or
// remove an arbitrary path.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("netns name %q: want a plain name, not a path", name)
	}
	return nil
}
