package node

import (
	"errors"
	"fmt"
	"github.com/nodenet/nodenet/internal/netnsutil"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/vishvananda/netns"
)

const netnsDir = "/run/netns"

// inNetns runs fn on a thread inside the namespace at path.
func inNetns(path string, fn func() error) error { return netnsutil.Do(path, fn) }

// createNetns creates a named namespace with loopback up; it returns the
// path. The caller's namespace is unchanged.
func createNetns(name string) (string, error) {
	path := filepath.Join(netnsDir, name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return "", err
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		_ = netns.Set(orig)
		runtime.UnlockOSThread()
		return "", fmt.Errorf("create netns %s: %w", name, err)
	}
	ns.Close()
	if err := netns.Set(orig); err != nil {
		return "", fmt.Errorf("restore netns: %w", err)
	}
	runtime.UnlockOSThread()
	if err := inNetns(path, func() error { return setLoUp() }); err != nil {
		return path, err
	}
	return path, nil
}

func deleteNetns(name string) error {
	path := filepath.Join(netnsDir, name)
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", name, err)
	}
	return nil
}
