package ebpf

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/proxy"
)

// doomedKey is bpf/sockdestroy.c's struct doomed_key: a backend that left
// the service entry point vip.
type doomedKey = sockdestroyDoomedKey

// sockDestroyer closes the connected UDP sockets that socket LB sent to a
// backend that has since left their service (bpf/sockdestroy.c).
//
// Why a socket iterator with bpf_sock_destroy and not SOCK_DESTROY over
// sock_diag: both work per network namespace, but sock_diag destroys one
// socket per request and needs the socket's full 4-tuple, so it would
// first dump every UDP socket of every namespace to user space and match
// cookies there; the iterator matches in the kernel, against the reverse
// map the socket programs already keep, and destroys in the same pass. It
// needs Linux ≥ 6.5 and kernel BTF, which the load checks at start.
type sockDestroyer struct {
	cgroup    string
	log       *slog.Logger
	iter      *link.Iter
	doomed    *ebpf.Map
	destroyed *ebpf.Map
}

// loadDestroyer loads the iterator for family f against the data plane's
// reverse map. It is not pinned: it runs only when this process syncs.
func loadDestroyer(f proxy.Family, cgroup string, reverse *ebpf.Map, log *slog.Logger) (*sockDestroyer, error) {
	spec, err := loadSockdestroy()
	if err != nil {
		return nil, err
	}
	fam := uint16(unix.AF_INET)
	if f == proxy.IPv6 {
		fam = unix.AF_INET6
	}
	if err := spec.Variables["want_family"].Set(fam); err != nil {
		return nil, fmt.Errorf("set the socket destroy program's family: %w", err)
	}
	var objs sockdestroyObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"reverse": reverse}}); err != nil {
		return nil, fmt.Errorf("connected UDP socket cleanup (needs kernel BTF at /sys/kernel/btf/vmlinux and bpf_sock_destroy, Linux ≥ 6.5): %w", loadError(err, ""))
	}
	// The link holds the program; the reverse map stays the data plane's.
	defer objs.DestroyUdp.Close()
	it, err := link.AttachIter(link.IterOptions{Program: objs.DestroyUdp})
	if err != nil {
		objs.Close()
		return nil, fmt.Errorf("attach the UDP socket iterator: %w", err)
	}
	return &sockDestroyer{cgroup: cgroup, log: log, iter: it, doomed: objs.Doomed, destroyed: objs.Destroyed}, nil
}

func (s *sockDestroyer) Close() {
	s.iter.Close()
	s.doomed.Close()
	s.destroyed.Close()
}

// destroy closes the translated connected UDP sockets of every namespace
// whose sockets the programs translate that are sent to one of pairs'
// backends through its service, and returns how many it closed. The
// doomed map holds pairs only for the run.
func (s *sockDestroyer) destroy(pairs []doomedKey) (int, error) {
	if len(pairs) == 0 {
		return 0, nil
	}
	pairs = pairs[:min(len(pairs), int(s.doomed.MaxEntries()))]
	one := make([]uint8, len(pairs))
	for i := range one {
		one[i] = 1
	}
	if _, err := s.doomed.BatchUpdate(pairs, one, nil); err != nil {
		return 0, fmt.Errorf("write doomed backends: %w", err)
	}
	defer func() {
		if _, err := s.doomed.BatchDelete(pairs, nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			s.log.Warn("clear doomed backends", "err", err)
		}
	}()
	var errs []error
	for _, ns := range s.namespaces() {
		if err := netnsutil.Do(ns, s.run); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("netns %s: %w", ns, err))
		}
	}
	var zero uint32
	var n uint64
	if err := s.destroyed.Lookup(&zero, &n); err != nil {
		errs = append(errs, fmt.Errorf("read destroyed count: %w", err))
	}
	_ = s.destroyed.Put(&zero, uint64(0))
	return int(n), errors.Join(errs...)
}

// run walks the UDP sockets of the calling thread's namespace: an
// iterator instance is bound to the namespace it is created in.
func (s *sockDestroyer) run() error {
	r, err := s.iter.Open()
	if err != nil {
		return fmt.Errorf("open UDP socket iterator: %w", err)
	}
	defer r.Close()
	_, err = io.Copy(io.Discard, r)
	return err
}

// namespaces are the network namespaces translated sockets can live in:
// those of the threads of every process in the attached cgroup tree (a
// pod's, the node's for host processes), and the named ones (a process can
// make a socket in a namespace it then leaves; a pod's namespace is named
// by its runtime). One path per namespace.
func (s *sockDestroyer) namespaces() []string {
	seen := map[netnsutil.Inode]bool{}
	var out []string
	add := func(p string) {
		ino, err := netnsutil.InodeOf(p)
		if err != nil || seen[ino] {
			return
		}
		seen[ino] = true
		out = append(out, p)
	}
	if ents, err := os.ReadDir(netnsutil.Dir); err == nil {
		for _, e := range ents {
			add(filepath.Join(netnsutil.Dir, e.Name()))
		}
	}
	_ = filepath.WalkDir(s.cgroup, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		procs, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, pid := range strings.Fields(string(procs)) {
			if _, err := strconv.Atoi(pid); err != nil {
				continue
			}
			tasks, _ := os.ReadDir(filepath.Join("/proc", pid, "task"))
			for _, t := range tasks {
				add(filepath.Join("/proc", pid, "task", t.Name(), "ns", "net"))
			}
		}
		return nil
	})
	return out
}

// closeDoomedSockets closes the connected UDP sockets of the backends the
// last sync removed. A failure is logged, not returned: the maps are
// right, and such sockets time out in the application at worst.
func (d *DataPlane) closeDoomedSockets() {
	doomed := d.state.doomed
	d.state.doomed = nil
	if len(doomed) == 0 || d.destroyer == nil {
		return
	}
	n, err := d.destroyer.destroy(doomed)
	if err != nil {
		d.log.Warn("closing connected UDP sockets of removed backends", "err", err)
	}
	if n > 0 {
		d.log.Info("closed connected UDP sockets of removed backends", "sockets", n, "backends", len(doomed))
	}
}
