package cluster

import (
	"errors"
	"fmt"
	"github.com/nodenet/nodenet/internal/netnsutil"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

const netnsDir = "/run/netns"

// inNetns runs fn on a thread inside the namespace at path.
func inNetns(path string, fn func() error) error { return netnsutil.Do(path, fn) }

// createNetns creates a named namespace (bind-mounted under /run/netns) with
// loopback up. An existing one is reused.
func createNetns(name string) error {
	path := filepath.Join(netnsDir, name)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("create netns %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	h, err := nlHandle(name)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("netns %s: lo: %w", name, err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("netns %s: set lo up: %w", name, err)
	}
	return nil
}

func nlHandle(name string) (*netlink.Handle, error) {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", name, err)
	}
	return h, nil
}

// listNetns returns the names under /run/netns that start with prefix.
func listNetns(prefix string) []string {
	ents, _ := os.ReadDir(netnsDir)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// nsInode identifies a namespace file.
func nsInode(path string) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false
	}
	return st.Ino, true
}

// pidsInNetns lists processes whose network namespace is one of inodes.
func pidsInNetns(inodes map[uint64]bool) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if ino, ok := nsInode(filepath.Join("/proc", e.Name(), "ns", "net")); ok && inodes[ino] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removeNetns kills every process in the named namespaces and deletes them.
// It is idempotent.
func removeNetns(names []string) error {
	inodes := map[uint64]bool{}
	for _, n := range names {
		if ino, ok := nsInode(filepath.Join(netnsDir, n)); ok {
			inodes[ino] = true
		}
	}
	if len(inodes) > 0 {
		for sig, deadline := syscall.SIGKILL, time.Now().Add(10*time.Second); ; {
			pids := pidsInNetns(inodes)
			if len(pids) == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("processes %v still in the cluster namespaces", pids)
			}
			for _, p := range pids {
				_ = syscall.Kill(p, sig)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var errs []error
	for _, n := range names {
		path := filepath.Join(netnsDir, n)
		if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount netns %s: %w", n, err))
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove netns %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}
