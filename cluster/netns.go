package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// pidsInNetns lists processes whose network namespace is one of inodes.
func pidsInNetns(inodes map[netnsutil.Inode]bool) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if ino, err := netnsutil.InodeOf(filepath.Join("/proc", e.Name(), "ns", "net")); err == nil && inodes[ino] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removeNetns kills every process in the named namespaces and deletes them.
// It is idempotent.
func removeNetns(names []string) error {
	inodes := map[netnsutil.Inode]bool{}
	for _, n := range names {
		if ino, err := netnsutil.InodeOf(netnsutil.Path(n)); err == nil {
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
		errs = append(errs, netnsutil.Delete(n))
	}
	return errors.Join(errs...)
}
