package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/cgroup2"
	"github.com/nodenet/nodenet/internal/netnsutil"
)

// cgroupSlice is the cgroup (below the cgroup v2 mount) holding every
// local cluster's node cgroups.
const cgroupSlice = "nodenet.slice"

// NodeCgroup is node i's cgroup: <cgroup v2 mount>/nodenet.slice/<cluster
// name>-node-<i>. The name is unique among live clusters (one `up` per
// name, owner.go), so two clusters never share a node cgroup.
func NodeCgroup(name string, i int) (string, error) {
	mnt, err := cgroup2.Mount()
	if err != nil {
		return "", err
	}
	return filepath.Join(mnt, cgroupSlice, name+"-"+NodeName(i)), nil
}

// mountNode gives node i's root the two kernel filesystems a real node
// has at those paths, each the node's own although the nodes share one
// kernel: sys/fs/cgroup is a bind mount of the node's cgroup (which its
// agent starts every pod process in), so the DaemonSet's hostPath
// /sys/fs/cgroup makes the ebpf proxy attach to its node's pods only; and
// sys/fs/bpf is a bpffs of its own (every mount of bpf is a new
// instance), so each node's proxy pins in its own tree. Down undoes both.
func (c *Cluster) mountNode(i int) (err error) {
	nd := c.nodeDir(i)
	cg, err := NodeCgroup(c.cfg.Name, i)
	if err != nil {
		return fmt.Errorf("%s: node cgroup: %w", NodeName(i), err)
	}
	// Another cluster's down removes the slice when it holds no cgroup,
	// possibly between MkdirAll's parent and child: try again.
	for attempt := 1; ; attempt++ {
		err := cgroup2.Ensure(cg)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) || attempt == 3 {
			return fmt.Errorf("%s: %w", NodeName(i), err)
		}
	}
	cgDir, bpfDir := filepath.Join(nd, "sys/fs/cgroup"), filepath.Join(nd, "sys/fs/bpf")
	for _, d := range []string{cgDir, bpfDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount(cg, cgDir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("%s: bind cgroup %s on %s: %w", NodeName(i), cg, cgDir, err)
	}
	defer func() {
		if err != nil {
			_ = unix.Unmount(cgDir, unix.MNT_DETACH)
		}
	}()
	if err := unix.Mount("bpf", bpfDir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("%s: mount bpffs on %s: %w", NodeName(i), bpfDir, err)
	}
	return nil
}

// unmountUnder detaches every mount below dir (the nodes' bpffs and
// cgroup binds, stacked ones too), deepest first, so that removing the
// directory never descends into a kernel filesystem: a bpffs would lose
// its pins file by file, a cgroup bind its child cgroups. Detached, a
// node's bpffs goes away with its last user, and with it the pinned
// programs and links.
func unmountUnder(dir string) error {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	points, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points below dir in this mount namespace,
// deepest (and most recent, for stacked mounts) first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("list mounts: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if p := cgroup2.UnescapeMountinfo(fields[4]); strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("list mounts: %w", err)
	}
	// mountinfo lists parents before children and older mounts before
	// the ones stacked on them: reversed, each is unmounted before what
	// it covers.
	slices.Reverse(points)
	return points, nil
}

// removeNodeCgroups kills whatever is left in the cluster's node cgroups
// (a pod process that escaped its namespace's teardown would keep one
// busy) and removes them, then the slice once no cluster has a cgroup in
// it. Other clusters' cgroups stay.
func removeNodeCgroups(name string) error {
	mnt, err := cgroup2.Mount()
	if errors.Is(err, cgroup2.ErrNotMounted) {
		return nil
	}
	if err != nil {
		return err
	}
	slice := filepath.Join(mnt, cgroupSlice)
	ents, err := os.ReadDir(slice)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list node cgroups: %w", err)
	}
	own := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `-node-[0-9]+$`)
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !own.MatchString(e.Name()) {
			continue
		}
		dir := filepath.Join(slice, e.Name())
		if err := emptyCgroup(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, cgroup2.Remove(dir))
	}
	// The slice goes with the last cluster: rmdir refuses while another
	// cluster's node cgroup is in it (EBUSY), and a cluster starting at this
	// moment creates it again (mountNode retries).
	if err := unix.Rmdir(slice); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("remove %s: %w", slice, err))
	}
	return errors.Join(errs...)
}

// emptyCgroup kills every process in dir and its children (cgroup.kill)
// and waits until none is left.
func emptyCgroup(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("kill the processes of cgroup %s: %w", dir, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		ev, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		if strings.Contains(string(ev), "populated 0") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes still in it after cgroup.kill", dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// netnsCgroup is the node cgroup of a process in the named network
// namespace ("" when none is in one: the vpc namespace's components run in
// up's cgroup).
func netnsCgroup(netns string) string {
	ino, err := netnsutil.InodeOf(netnsutil.Path(netns))
	if err != nil {
		return ""
	}
	mnt, err := cgroup2.Mount()
	if err != nil {
		return ""
	}
	for _, pid := range pidsInNetns(map[netnsutil.Inode]bool{ino: true}) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if p, ok := strings.CutPrefix(line, "0::/"+cgroupSlice+"/"); ok && p != "" {
				return filepath.Join(mnt, cgroupSlice, p)
			}
		}
	}
	return ""
}
