package cgroup2

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotMounted says no cgroup v2 hierarchy is mounted.
var ErrNotMounted = errors.New("no cgroup v2 hierarchy mounted (mount -t cgroup2 none /sys/fs/cgroup)")

// Mount is the mount point of the cgroup v2 hierarchy this process sees.
func Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find the cgroup v2 mount: %w", err)
	}
	defer f.Close()
	return mountFrom(f)
}

// mountFrom reads mountinfo lines ("… mount-point … - fstype source …")
// and returns the first cgroup2 mount of the hierarchy's root (field 4 is
// "/"): a bind mount of a child cgroup shows only part of the tree. Without
// one, the first cgroup2 mount (a container sees its own cgroup as root).
func mountFrom(r io.Reader) (string, error) {
	best, bestIsRoot := "", false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 1 || sf[0] != "cgroup2" {
			continue
		}
		isRoot := pf[3] == "/"
		if best == "" || isRoot && !bestIsRoot {
			best, bestIsRoot = UnescapeMountinfo(pf[4]), isRoot
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	if best == "" {
		return "", ErrNotMounted
	}
	return best, nil
}

// UnescapeMountinfo undoes mountinfo's octal escapes (\040 for a space)
// in a mount point or root field.
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// IsCgroup2 reports whether dir is a directory of a cgroup v2 hierarchy.
func IsCgroup2(dir string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(dir, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC
}

// Ensure creates dir (and missing parents) inside a cgroup v2 hierarchy;
// an existing one is fine.
func Ensure(dir string) error {
	parent := filepath.Dir(dir)
	for !IsCgroup2(parent) {
		if parent == filepath.Dir(parent) {
			return fmt.Errorf("create cgroup %s: not inside a cgroup v2 hierarchy", dir)
		}
		parent = filepath.Dir(parent)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	return nil
}

// Add moves process pid into the cgroup dir.
func Add(dir string, pid int) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move process %d into cgroup %s: %w", pid, dir, err)
	}
	return nil
}

// Remove deletes the cgroup dir and its descendants, deepest first. A
// cgroup that still holds processes cannot be removed, and moving them
// elsewhere is not Remove's call, so it reports them instead. A missing
// dir is success.
func Remove(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			if errors.Is(err, unix.EBUSY) {
				procs, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
				err = fmt.Errorf("%w (processes still in it: %s)", err, strings.Join(strings.Fields(string(procs)), " "))
			}
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// Resolve returns dir if it is a cgroup v2 directory, else dir/unified if
// that is (a hybrid host's /sys/fs/cgroup, seen through a bind mount).
func Resolve(dir string) (string, error) {
	if IsCgroup2(dir) {
		return dir, nil
	}
	if u := filepath.Join(dir, "unified"); IsCgroup2(u) {
		return u, nil
	}
	return "", fmt.Errorf("%s is not a cgroup v2 directory (nor is %s/unified)", dir, dir)
}
