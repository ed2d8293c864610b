package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/vishvananda/netns"
)

const netnsDir = "/run/netns"

// inNetns runs fn on a thread switched into the namespace at path; child
// processes fn starts are born in it.
func inNetns(path string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(path)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", path, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("restore netns: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

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
