package hostrouting

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// Config says which traffic a Router forwards and where it attaches.
type Config struct {
	// Netns holds the node's interfaces: "" is the process's own,
	// otherwise a path or an iproute2 name.
	Netns string
	// PodNetworks are the cluster's pod networks (flannel's Network and
	// IPv6Network); LocalSubnets are this node's subnets inside them.
	PodNetworks, LocalSubnets []netip.Prefix
	// Bridge is the pod bridge (cni0). It may not exist yet: the CNI
	// plugin creates it with the first pod, and the Router attaches then.
	Bridge string
	// Uplinks are the interfaces other nodes' pods are reached through
	// (the external interface with host-gw, flannel.1 with vxlan). They
	// must exist.
	Uplinks []string
}

func (c Config) validate() error {
	var errs []error
	if len(c.PodNetworks) == 0 {
		errs = append(errs, errors.New("no pod network"))
	}
	if len(c.LocalSubnets) == 0 {
		errs = append(errs, errors.New("no local pod subnet"))
	}
	for _, p := range append(slices.Clone(c.PodNetworks), c.LocalSubnets...) {
		if !p.IsValid() || p != p.Masked() {
			errs = append(errs, fmt.Errorf("%s is not a network prefix", p))
		}
	}
	for _, s := range c.LocalSubnets {
		if !slices.ContainsFunc(c.PodNetworks, func(n netip.Prefix) bool { return n.Bits() <= s.Bits() && n.Contains(s.Addr()) }) {
			errs = append(errs, fmt.Errorf("local subnet %s is outside the pod networks %v", s, c.PodNetworks))
		}
	}
	if c.Bridge == "" {
		errs = append(errs, errors.New("no pod bridge"))
	}
	if len(c.Uplinks) == 0 {
		errs = append(errs, errors.New("no uplink interface"))
	}
	if slices.Contains(c.Uplinks, c.Bridge) {
		errs = append(errs, fmt.Errorf("%s is both the pod bridge and an uplink", c.Bridge))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("host routing config: %w", err)
	}
	return nil
}

// Address classes of the nets map (bpf/hostrouting.c).
const (
	netRemotePods = 1
	netLocalPods  = 2
)

// Router holds the loaded programs and their attachments. Close detaches.
type Router struct {
	cfg  Config
	log  *slog.Logger
	objs hostroutingObjects

	mu          sync.Mutex
	attached    map[int]attachment // by ifindex
	bridgeIndex int                // 0 while there is no bridge

	stop context.CancelFunc
	done chan struct{}
}

// attachment is one program on one interface: to_pods on an uplink,
// from_pods on a bridge port (a pod's veth).
type attachment struct {
	name   string
	uplink bool
	link   link.Link
}

// Start loads the programs, attaches them to the uplinks and the bridge's
// ports, and follows the interfaces from then on: a pod's veth gets its
// program within a netlink notification of joining the bridge, and a
// bridge or uplink re-created later is picked up the same way.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (r *Router, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r = &Router{cfg: cfg, log: log, attached: map[int]attachment{}, done: make(chan struct{})}
	if err := loadHostroutingObjects(&r.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load host routing programs (the verifier's last lines follow): %+v", ve)
		}
		return nil, fmt.Errorf("load host routing programs: %w", err)
	}
	defer func() {
		if err != nil {
			r.detachAll()
			r.objs.Close()
		}
	}()
	if err := r.fillNets(); err != nil {
		return nil, err
	}
	updates := make(chan netlink.LinkUpdate, 256)
	subDone := make(chan struct{})
	var links []netlink.Link
	err = r.inNetns(func() error {
		// Subscribe before listing, so nothing created in between is
		// missed; seeing a link twice is harmless.
		err := netlink.LinkSubscribeWithOptions(updates, subDone, netlink.LinkSubscribeOptions{
			ErrorCallback: func(err error) { log.Debug("host routing: link subscription", "err", err) },
		})
		if err != nil {
			return fmt.Errorf("subscribe to links: %w", err)
		}
		if links, err = netlink.LinkList(); err != nil {
			return fmt.Errorf("list links: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("host routing in netns %q: %w", cfg.Netns, err)
	}
	defer func() {
		if err != nil {
			close(subDone)
		}
	}()
	for _, name := range cfg.Uplinks {
		if !slices.ContainsFunc(links, func(l netlink.Link) bool { return l.Attrs().Name == name }) {
			return nil, fmt.Errorf("host routing: uplink %s does not exist in netns %q", name, cfg.Netns)
		}
	}
	// The bridge first: its ports are recognised by its index.
	slices.SortStableFunc(links, func(a, b netlink.Link) int {
		return boolInt(b.Attrs().Name == cfg.Bridge) - boolInt(a.Attrs().Name == cfg.Bridge)
	})
	for _, l := range links {
		if err := r.linkChanged(l, false); err != nil {
			return nil, err
		}
	}
	if r.bridgeIndex == 0 {
		log.Info("host routing: pod bridge not there yet; following it", "bridge", cfg.Bridge)
	} else if err := r.seedFdb(); err != nil {
		// Only a start-up shortcut: the programs learn each MAC from
		// the pod's next frame anyway.
		log.Warn("host routing: reading the bridge's learnt MACs", "err", err)
	}
	ctx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
	go r.follow(ctx, updates, subDone)
	log.Info("host routing: eBPF forwarding between pods and uplinks", "bridge", cfg.Bridge, "uplinks", cfg.Uplinks,
		"podNetworks", cfg.PodNetworks, "localSubnets", cfg.LocalSubnets)
	return r, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (r *Router) inNetns(fn func() error) error {
	if r.cfg.Netns == "" {
		return fn()
	}
	return netnsutil.Do(netnsutil.Path(r.cfg.Netns), fn)
}

// fillNets writes the pod networks and, more specific, the local subnets.
func (r *Router) fillNets() error {
	put := func(p netip.Prefix, class uint32) error {
		if err := r.objs.Nets.Put(netKey(p), class); err != nil {
			return fmt.Errorf("host routing: write %s to the nets map: %w", p, err)
		}
		return nil
	}
	for _, p := range r.cfg.PodNetworks {
		if err := put(p, netRemotePods); err != nil {
			return err
		}
	}
	for _, p := range r.cfg.LocalSubnets {
		if err := put(p, netLocalPods); err != nil {
			return err
		}
	}
	return nil
}

// netKey is the trie key of a prefix: the family word, then the address
// bytes in network order.
func netKey(p netip.Prefix) hostroutingNetKey {
	k := hostroutingNetKey{Prefixlen: 32 + uint32(p.Bits()), Family: unix.AF_INET}
	b := p.Addr().AsSlice()
	if p.Addr().Is6() {
		k.Family = unix.AF_INET6
	}
	for i := 0; i < len(b)/4; i++ {
		k.Addr[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return k
}

// linkChanged brings the attachments in line with one link's state.
// Returning an error is for Start: the follower logs and goes on.
func (r *Router) linkChanged(l netlink.Link, deleted bool) error {
	a := l.Attrs()
	if a.Name == r.cfg.Bridge {
		return r.setBridge(l, deleted)
	}
	r.mu.Lock()
	_, had := r.attached[a.Index]
	bridgeIndex := r.bridgeIndex
	r.mu.Unlock()
	uplink := slices.Contains(r.cfg.Uplinks, a.Name)
	want := !deleted && (uplink || bridgeIndex != 0 && a.MasterIndex == bridgeIndex && l.Type() == "veth")
	switch {
	case want && !had:
		return r.attach(a.Name, a.Index, uplink)
	case !want && had:
		r.forget(a.Index)
	}
	return nil
}

// setBridge records the bridge's index and MAC for the programs.
func (r *Router) setBridge(l netlink.Link, deleted bool) error {
	var v hostroutingBridge
	if !deleted {
		copy(v.Mac[:], l.Attrs().HardwareAddr)
		v.Ifindex = uint32(l.Attrs().Index)
	}
	if err := r.objs.BridgeState.Put(uint32(0), v); err != nil {
		return fmt.Errorf("host routing: record bridge %s: %w", r.cfg.Bridge, err)
	}
	r.mu.Lock()
	changed := r.bridgeIndex != int(v.Ifindex)
	r.bridgeIndex = int(v.Ifindex)
	r.mu.Unlock()
	if changed {
		r.log.Info("host routing: pod bridge", "bridge", r.cfg.Bridge, "ifindex", v.Ifindex, "mac", l.Attrs().HardwareAddr.String())
	}
	return nil
}

// attach puts a program on the interface's TCX ingress, after any program
// already there (a proxy's NodePort program keeps seeing packets first;
// pod-to-pod packets are of no interest to it).
func (r *Router) attach(name string, ifindex int, uplink bool) error {
	prog := r.objs.FromPods
	if uplink {
		prog = r.objs.ToPods
	}
	var l link.Link
	err := r.inNetns(func() (err error) {
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress, Anchor: link.Tail()})
		return err
	})
	if err != nil {
		if !uplink && errors.Is(err, unix.ENODEV) {
			return nil // a pod gone already
		}
		return fmt.Errorf("host routing: attach to %s (ifindex %d): %w", name, ifindex, err)
	}
	r.mu.Lock()
	r.attached[ifindex] = attachment{name: name, uplink: uplink, link: l}
	r.mu.Unlock()
	r.log.Debug("host routing: attached", "iface", name, "ifindex", ifindex, "uplink", uplink)
	return nil
}

// seedFdb copies into the fdb map what the kernel bridge has learnt on the
// attached pod veths. The programs learn a pod's MAC from its own frames;
// after a restart (flanneld's, which loads fresh maps) a pod that only
// receives would otherwise be reached through the bridge until it next
// sends. Local and permanent entries (the ports' own addresses) and
// group addresses are skipped.
func (r *Router) seedFdb() error {
	var entries []netlink.Neigh
	err := r.inNetns(func() (err error) {
		entries, err = netlink.NeighList(0, unix.AF_BRIDGE)
		return err
	})
	if err != nil {
		return fmt.Errorf("list bridge fdb: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range entries {
		a, ok := r.attached[e.LinkIndex]
		if !ok || a.uplink || e.MasterIndex != r.bridgeIndex || e.State&netlink.NUD_PERMANENT != 0 ||
			len(e.HardwareAddr) != 6 || e.HardwareAddr[0]&1 != 0 {
			continue
		}
		var k hostroutingMacKey
		copy(k.Mac[:], e.HardwareAddr)
		if err := r.objs.Fdb.Put(k, uint32(e.LinkIndex)); err != nil {
			return fmt.Errorf("write %s on %s to the fdb map: %w", e.HardwareAddr, a.name, err)
		}
		n++
	}
	r.log.Debug("host routing: pod MACs taken from the bridge's fdb", "count", n)
	return nil
}

// forget drops an attachment (the kernel detaches a deleted interface's
// programs itself) and, for a pod's veth, what the fdb learnt on it.
func (r *Router) forget(ifindex int) {
	r.mu.Lock()
	a, ok := r.attached[ifindex]
	delete(r.attached, ifindex)
	r.mu.Unlock()
	if !ok {
		return
	}
	a.link.Close()
	if a.uplink {
		r.log.Info("host routing: uplink gone", "iface", a.name)
		return
	}
	var (
		k     hostroutingMacKey
		v     uint32
		stale []hostroutingMacKey
	)
	it := r.objs.Fdb.Iterate()
	for it.Next(&k, &v) {
		if int(v) == ifindex {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		// Already gone is fine: the LRU may have evicted it.
		_ = r.objs.Fdb.Delete(k)
	}
}

// follow applies link notifications until ctx ends.
func (r *Router) follow(ctx context.Context, updates <-chan netlink.LinkUpdate, subDone chan struct{}) {
	defer close(r.done)
	defer func() {
		close(subDone)
		for range updates {
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-updates:
			if !ok {
				r.log.Error("host routing: link subscription closed; pods created from now on take the stack path")
				return
			}
			if u.Family == unix.AF_BRIDGE {
				// A bridge port's bridge-level attributes: no link type,
				// and the AF_UNSPEC message says the same and more.
				continue
			}
			if err := r.linkChanged(u.Link, u.Header.Type == unix.RTM_DELLINK); err != nil {
				r.log.Error("host routing: traffic through this interface takes the stack path", "iface", u.Attrs().Name, "err", err)
			}
		}
	}
}

func (r *Router) detachAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for idx, a := range r.attached {
		a.link.Close()
		delete(r.attached, idx)
	}
}

// Attached lists the interfaces the programs are attached to now.
func (r *Router) Attached() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.attached))
	for _, a := range r.attached {
		out = append(out, a.name)
	}
	slices.Sort(out)
	return out
}

// Close detaches the programs; from then on the stack forwards pod
// traffic again.
func (r *Router) Close() error {
	r.stop()
	<-r.done
	r.detachAll()
	return r.objs.Close()
}
