package shim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// errNoCommand is ExecWithMounts' usage error.
var errNoCommand = errors.New("no command")

// Mount is one volume as a container sees it: Source (a path of the
// agent's filesystem: under the node root, or a directory the agent
// wrote) bound on Target (the container's mountPath).
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// ExecWithMounts is the last step before a container's command: it runs in
// a private mount namespace of its own (the shim starts it with
// CLONE_NEWNS, which also makes every mount private, so nothing done here
// propagates back), binds each volume on its mount path and replaces
// itself with argv. It only returns on failure.
//
// A mount path that does not exist is not created on the real filesystem:
// its nearest existing ancestor is shadowed by a tmpfs that holds the
// ancestor's entries bound back (shadowDir), and the mount point is
// created in that tmpfs. So /etc/kube-flannel appears in the container
// while the host's /etc is never written.
func ExecWithMounts(mounts []Mount, argv []string) error {
	if len(argv) == 0 {
		return errNoCommand
	}
	// Parents before children: a volume may be mounted inside another.
	slices.SortStableFunc(mounts, func(a, b Mount) int {
		return strings.Count(filepath.Clean(a.Target), "/") - strings.Count(filepath.Clean(b.Target), "/")
	})
	shadowed := map[string]bool{}
	for _, m := range mounts {
		if err := bindVolume(m, shadowed); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.Source, m.Target, err)
		}
	}
	// A working directory inside a volume is looked up again, through it.
	if wd, err := os.Getwd(); err == nil {
		_ = os.Chdir(wd)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}

func bindVolume(m Mount, shadowed map[string]bool) error {
	if !filepath.IsAbs(m.Target) {
		return errors.New("mount path must be absolute")
	}
	target := filepath.Clean(m.Target)
	st, err := os.Stat(m.Source)
	if err != nil {
		return err
	}
	if err := mountPoint(target, st.IsDir(), shadowed); err != nil {
		return err
	}
	if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	// Below target is the volume now, a real directory: never write there.
	for d := range shadowed {
		if d == target || strings.HasPrefix(d, target+"/") {
			delete(shadowed, d)
		}
	}
	if !m.ReadOnly {
		return nil
	}
	// A read-only remount must keep the flags the source's mount has
	// (nosuid, nodev, ...), or the kernel refuses it where they are locked.
	var sfs unix.Statfs_t
	if err := unix.Statfs(target, &sfs); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	for st, ms := range map[int64]uintptr{unix.ST_NOSUID: unix.MS_NOSUID, unix.ST_NODEV: unix.MS_NODEV, unix.ST_NOEXEC: unix.MS_NOEXEC,
		unix.ST_NOATIME: unix.MS_NOATIME, unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME} {
		if sfs.Flags&st != 0 {
			flags |= ms
		}
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("remount read-only: %w", err)
	}
	return nil
}

// mountPoint makes target exist as a directory (dir) or a file, without
// writing to the real filesystem.
func mountPoint(target string, dir bool, shadowed map[string]bool) error {
	if st, err := os.Lstat(target); err == nil {
		if st.IsDir() != dir {
			return fmt.Errorf("mount path exists and is not a %s", map[bool]string{true: "directory", false: "file"}[dir])
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	anc := filepath.Dir(target)
	for {
		if _, err := os.Lstat(anc); err == nil {
			break
		}
		anc = filepath.Dir(anc)
	}
	if !shadowed[anc] {
		if anc == "/" {
			return errors.New("cannot create a mount point directly under /")
		}
		if err := shadowDir(anc); err != nil {
			return fmt.Errorf("shadow %s: %w", anc, err)
		}
		shadowed[anc] = true
	}
	// Everything created below anc is in the shadow's tmpfs.
	for d := filepath.Dir(target); d != anc; d = filepath.Dir(d) {
		shadowed[d] = true
	}
	if dir {
		shadowed[target] = true // until a volume is bound on it
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// shadowDir mounts a tmpfs on dir holding the same entries: directories
// and files are bound back from a detached copy of dir's mount tree taken
// before (open_tree), symbolic links are recreated. Entries added later
// live in the tmpfs only.
func shadowDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	links := map[string]string{}
	for _, e := range entries {
		if e.Type()&os.ModeSymlink != 0 {
			if links[e.Name()], err = os.Readlink(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	sys := st.Sys().(*syscall.Stat_t)
	opts := fmt.Sprintf("mode=%o,uid=%d,gid=%d", st.Mode().Perm(), sys.Uid, sys.Gid)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		return fmt.Errorf("tmpfs: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if target, ok := links[e.Name()]; ok {
			if err := os.Symlink(target, p); err != nil {
				return err
			}
			continue
		}
		if e.IsDir() {
			err = os.Mkdir(p, 0o755)
		} else {
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return err
		}
		sub, err := unix.OpenTree(tree, e.Name(), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			return fmt.Errorf("open_tree %s: %w", e.Name(), err)
		}
		err = unix.MoveMount(sub, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(sub)
		if err != nil {
			return fmt.Errorf("move_mount %s: %w", p, err)
		}
	}
	return nil
}
