package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// daemonPID finds the process of `nodenet <sub>` (or of the single-purpose
// nodenet-<sub>) running in the named network namespace: argv[1] is the
// subcommand (the logshim that started a container has "logshim" there),
// the namespace is compared by inode so another cluster's processes never
// match. 0 when there is none.
func daemonPID(netns, sub string) (int, error) {
	want, err := netnsutil.InodeOf(netnsutil.Path(netns))
	if err != nil {
		return 0, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		argv := bytes.Split(cmdline, []byte{0})
		// `nodenet <sub>`, or a single-purpose nodenet-<sub> (the
		// DaemonSet's proxy is nodenet-proxy).
		name := filepath.Base(string(argv[0]))
		if !(name == "nodenet" && len(argv) >= 2 && string(argv[1]) == sub) && name != "nodenet-"+sub {
			continue
		}
		ino, err := netnsutil.InodeOf(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err != nil || ino != want {
			continue
		}
		return pid, nil
	}
	return 0, nil
}

// kill9 sends SIGKILL to the daemon and returns its pid.
func kill9(netns, sub string) (int, error) {
	pid, err := daemonPID(netns, sub)
	if err != nil {
		return 0, err
	}
	if pid == 0 {
		return 0, fmt.Errorf("no nodenet %s running in %s", sub, netns)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill -9 %d (nodenet %s): %w", pid, sub, err)
	}
	return pid, nil
}
