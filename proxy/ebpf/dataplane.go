package ebpf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/proxy"
)

// The core takes a DataPlane as a proxy.DataPlane and finds its integrity
// check by a type assertion; these make a drifting signature a compile
// error.
var (
	_ proxy.DataPlane        = (*DataPlane)(nil)
	_ proxy.IntegrityChecker = (*DataPlane)(nil)
)

// DefaultPinRoot is where pins go unless Config.PinDir says otherwise: one
// directory per family below it.
const DefaultPinRoot = "/sys/fs/bpf/nodenet"

// Config places one family's data plane.
type Config struct {
	Family proxy.Family
	// Cgroup is the cgroup v2 directory whose sockets (and its
	// descendants') are load-balanced. A hierarchy's root cgroup is refused
	// unless RootCgroupOK: a real node's proxy translates for every process
	// (as Cilium attaches at the root), but tests and the local cluster,
	// which share one kernel between nodes, must attach only where nodenet
	// owns the processes.
	Cgroup       string
	RootCgroupOK bool
	// PinDir is a directory on a bpf filesystem for this family's maps and
	// links; "" means DefaultPinRoot/ipv4 or /ipv6.
	PinDir string
	Log    *slog.Logger

	// Interfaces are the node's external interfaces: traffic arriving on
	// them for an entry point is translated by a TCX ingress program
	// (tc.go). Empty: socket-level load balancing only.
	Interfaces []string
	// NetNS is the node's network namespace (a path such as
	// /run/netns/node-a): Interfaces live in it, and wildcard NodePorts
	// answer on its addresses (localaddrs.go); "" is this process's own.
	NetNS string
	// FollowNode (--bpf-tc-interfaces=auto) keeps the tc interfaces the
	// links holding a node address as addresses come and go (tcfollow.go);
	// Interfaces is then the choice at start. nil: Interfaces stay.
	FollowNode *NodeAddrChoice
}

// hook is one program and where it attaches.
type hook struct {
	prog   string
	attach ebpf.AttachType
}

// hooks per family: the names are the C functions (and the link pins'
// suffixes).
var hooks = map[proxy.Family][]hook{
	proxy.IPv4: {
		{socklbProgConnect4, ebpf.AttachCGroupInet4Connect},
		{socklbProgSendmsg4, ebpf.AttachCGroupUDP4Sendmsg},
		{socklbProgRecvmsg4, ebpf.AttachCGroupUDP4Recvmsg},
		{socklbProgGetpeername4, ebpf.AttachCgroupInet4GetPeername},
	},
	proxy.IPv6: {
		{socklbProgConnect6, ebpf.AttachCGroupInet6Connect},
		{socklbProgSendmsg6, ebpf.AttachCGroupUDP6Sendmsg},
		{socklbProgRecvmsg6, ebpf.AttachCGroupUDP6Recvmsg},
		{socklbProgGetpeername6, ebpf.AttachCgroupInet6GetPeername},
	},
}

// DataPlane is the ebpf proxy.DataPlane for one family. The programs are
// loaded and attached by Prepare (the core runs it at start, while the
// informers list) or else by the first Sync, never by New (so Cleanup on
// a fresh DataPlane touches nothing it does not remove); syncs only
// update maps.
type DataPlane struct {
	cfg Config
	log *slog.Logger

	// mu guards what a metrics scrape reads while the core syncs.
	mu    sync.Mutex
	maps  []*ebpf.Map // open while loaded, closed by Close/Cleanup
	state *state
	// synced: a Sync has succeeded since load; until then state knows
	// nothing of what the maps hold.
	synced bool
	// destroyer closes connected UDP sockets of removed backends.
	destroyer *sockDestroyer
	// local keeps local_addrs (wildcard NodePorts), watch follows the
	// node namespace's addresses for it (localaddrs.go).
	local *localAddrSet
	watch *addrWatcher
	// follow re-chooses the tc interfaces on address changes (with
	// Config.FollowNode); tcChanges counts what it did.
	follow    *tcFollow
	tcChanges tcChanges
	metrics   mapMetrics
	skipped   map[string]int // entry points skipped, by reason
}

// New returns a data plane; it does not touch the kernel.
func New(cfg Config) *DataPlane {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.PinDir == "" {
		cfg.PinDir = filepath.Join(DefaultPinRoot, familyDir(cfg.Family))
	}
	return &DataPlane{cfg: cfg, log: cfg.Log.With("family", cfg.Family),
		metrics: newMapMetrics(cfg.Family.String()), skipped: map[string]int{}}
}

func familyDir(f proxy.Family) string {
	if f == proxy.IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// Name implements proxy.DataPlane.
func (d *DataPlane) Name() string { return "ebpf" }

// PinDir is where this data plane pins its maps and links.
func (d *DataPlane) PinDir() string { return d.cfg.PinDir }

// Sync implements proxy.DataPlane: map updates only, once loaded.
func (d *DataPlane) Sync(ctx context.Context, snap *proxy.Snapshot, changed proxy.ChangeSet) (proxy.SyncResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == nil {
		if err := d.load(); err != nil {
			return proxy.SyncResult{}, err
		}
	}
	if !d.synced {
		// The first sync on freshly loaded maps reads them back and
		// converges on whatever an earlier process left. The load
		// listed the local addresses and its subscription keeps them.
		changed = proxy.ChangeSet{Full: true}
	} else if changed.Full {
		// Between full syncs the address subscription keeps it.
		if _, err := d.local.resync(); err != nil {
			return proxy.SyncResult{}, err
		}
	}
	res, err := d.state.sync(snap, changed)
	if err != nil {
		return res, fmt.Errorf("sync %s BPF maps: %w", d.cfg.Family, err)
	}
	d.synced = true
	d.closeDoomedSockets()
	return res, nil
}

// Prepare implements proxy.Preparer: it loads and attaches (load) ahead of
// the first Sync, which the core runs while the informers list. At 10,000
// Services this is about a third of a cold first sync (bench/README.md).
func (d *DataPlane) Prepare(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != nil {
		return nil
	}
	return d.load()
}

// load opens (or creates) the pinned maps, loads the programs and attaches
// them to the cgroup; links already pinned by an earlier process are
// switched to the new programs in place, so sockets are translated without
// a gap across a restart.
func (d *DataPlane) load() (err error) {
	if err := checkCgroup(d.cfg.Cgroup, d.cfg.RootCgroupOK); err != nil {
		return err
	}
	if err := checkBPFFS(d.cfg.PinDir); err != nil {
		return err
	}
	if err := os.MkdirAll(d.cfg.PinDir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	spec, err := loadSocklb()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, h := range hooks[d.cfg.Family] {
		want[h.prog] = true
	}
	for name := range spec.Programs {
		if !want[name] {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: d.cfg.PinDir}})
	if err != nil {
		return loadError(err, d.cfg.PinDir)
	}
	// The links keep the programs; only the maps stay open here.
	defer func() {
		for _, p := range coll.Programs {
			p.Close()
		}
		if err != nil {
			for _, m := range coll.Maps {
				m.Close()
			}
		}
	}()
	// Loaded before anything attaches, so a kernel without what it needs
	// fails the start with nothing changed.
	destroyer, err := loadDestroyer(d.cfg.Family, d.cfg.Cgroup, coll.Maps[socklbMapReverse], d.log)
	if err != nil {
		return err
	}
	if err := d.attach(coll); err != nil {
		destroyer.Close()
		return err
	}
	srcRanges, err := d.loadTC()
	if err != nil {
		destroyer.Close()
		return err
	}
	d.destroyer = destroyer
	svcs, bes := coll.Maps[socklbMapServices], coll.Maps[socklbMapBackends]
	d.maps = []*ebpf.Map{svcs, bes, coll.Maps[socklbMapReverse], coll.Maps[socklbMapAffinity]}
	d.state = newState(d.cfg.Family, kernelTable[svcKey, svcValue]{svcs}, kernelTable[backendKey, addrPort]{bes}, d.log)
	d.state.onSkip = func(reason string) { d.skipped[reason]++ }
	if srcRanges != nil {
		d.maps = append(d.maps, srcRanges)
		d.state.ranges = newRangeSet(kernelTable[tcnatSrcKey, uint8]{srcRanges})
	}
	d.maps = append(d.maps, coll.Maps[socklbMapLocalAddrs])
	if err := d.startLocalAddrs(coll.Maps[socklbMapLocalAddrs]); err != nil {
		d.closeLocked()
		return err
	}
	return nil
}

// attach attaches every hook of the family, updating pinned links in place.
// A failure detaches the links this call created.
func (d *DataPlane) attach(coll *ebpf.Collection) (err error) {
	var created []link.Link
	defer func() {
		if err != nil {
			for _, l := range created {
				_ = l.Unpin()
				l.Close()
			}
		}
	}()
	for _, h := range hooks[d.cfg.Family] {
		prog := coll.Programs[h.prog]
		pin := d.linkPin(h.prog)
		l, err := link.LoadPinnedLink(pin, nil)
		switch {
		case err == nil:
			err = l.Update(prog)
			l.Close()
			if err != nil {
				return fmt.Errorf("update pinned link %s: %w", pin, err)
			}
			continue
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("open pinned link %s: %w", pin, err)
		}
		l, err = link.AttachCgroup(link.CgroupOptions{Path: d.cfg.Cgroup, Attach: h.attach, Program: prog})
		if err != nil {
			return fmt.Errorf("attach %s to cgroup %s: %w", h.prog, d.cfg.Cgroup, err)
		}
		created = append(created, l)
		if err := l.Pin(pin); err != nil {
			return fmt.Errorf("pin link %s: %w", pin, err)
		}
	}
	for _, l := range created {
		l.Close() // the pin keeps it attached
	}
	return nil
}

func (d *DataPlane) linkPin(prog string) string { return filepath.Join(d.cfg.PinDir, "link-"+prog) }

// checkCgroup accepts a cgroup v2 directory other than a hierarchy's root
// (only non-root cgroups have cgroup.type), or the root with rootOK.
func checkCgroup(dir string, rootOK bool) error {
	if dir == "" {
		return errors.New("no cgroup to attach the socket programs to")
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("statfs cgroup %s: %w", dir, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%s is not a cgroup v2 directory", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.type")); err != nil && !rootOK {
		return fmt.Errorf("refusing cgroup %s: not a child cgroup (the root cgroup would translate every process's sockets): %w", dir, err)
	}
	return nil
}

// Intact implements proxy.IntegrityChecker: every link pin is still there
// (a `rm -r` of the pin directory or another mode's cleanup removes them).
func (d *DataPlane) Intact(ctx context.Context) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == nil {
		return true, nil
	}
	for _, h := range hooks[d.cfg.Family] {
		if _, err := os.Stat(d.linkPin(h.prog)); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				// Reload on the next sync: the core repairs with a full one.
				d.closeLocked()
				return false, nil
			}
			return false, err
		}
	}
	if !d.tcIntact() {
		// d.mu is held: Close would deadlock.
		d.closeLocked()
		return false, nil
	}
	return true, nil
}

// Close releases this process's map handles; pinned state stays and keeps
// serving.
func (d *DataPlane) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closeLocked()
}

func (d *DataPlane) closeLocked() {
	// First: the watcher writes local_addrs through a map closed below.
	d.watch.stop()
	d.follow.close()
	for _, m := range d.maps {
		m.Close()
	}
	if d.destroyer != nil {
		d.destroyer.Close()
	}
	d.maps, d.state, d.destroyer, d.local, d.watch, d.follow = nil, nil, nil, nil, nil, nil
	d.synced = false
}

// Cleanup implements proxy.DataPlane: it detaches and unpins every link and
// removes the pinned maps and the pin directory, whichever process pinned
// them. Nothing pinned is success.
func (d *DataPlane) Cleanup(ctx context.Context) error {
	d.Close()
	if err := d.cleanupTC(); err != nil {
		return err
	}
	ents, err := os.ReadDir(d.cfg.PinDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read pin directory: %w", err)
	}
	var errs []error
	for _, e := range ents {
		p := filepath.Join(d.cfg.PinDir, e.Name())
		if l, err := link.LoadPinnedLink(p, nil); err == nil {
			// Unpinned and closed, the link's last reference is gone:
			// the kernel detaches it.
			if err := l.Unpin(); err != nil {
				errs = append(errs, fmt.Errorf("unpin link %s: %w", p, err))
			}
			l.Close()
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove pin %s: %w", p, err))
		}
	}
	if err := os.Remove(d.cfg.PinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove pin directory: %w", err))
	}
	// The shared parent goes with the last family.
	if parent := filepath.Dir(d.cfg.PinDir); parent == DefaultPinRoot {
		_ = os.Remove(parent)
	}
	return errors.Join(errs...)
}
