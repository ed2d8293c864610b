package ebpf

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/proxy"
)

// localAddr is bpf/lbmaps.h's struct local_addr, a key of local_addrs.
type localAddr = socklbLocalAddr

// localAddrSet keeps the local_addrs map (wildcard NodePorts answer on these
// addresses) equal to the node namespace's addresses of one family, the
// loopback excepted, as the nftables mode's NodePort rule excepts it. It
// lists them at start and at every full sync and follows an address
// subscription in between, so an address added or removed serves or stops
// serving NodePorts within the subscription's latency, without touching
// the services map: one address is one map write.
type localAddrSet struct {
	family proxy.Family
	t      table[localAddr, uint8]
	// list reads the namespace's addresses (netlink in the kernel, a
	// slice in unit tests).
	list func() ([]netip.Addr, error)
	log  *slog.Logger

	mu   sync.Mutex
	have map[localAddr]bool // what the map holds, after the last reconcile
}

func newLocalAddrSet(f proxy.Family, t table[localAddr, uint8], list func() ([]netip.Addr, error), log *slog.Logger) *localAddrSet {
	return &localAddrSet{family: f, t: t, list: list, log: log}
}

// servesNodePorts tells whether a is one of the addresses a wildcard
// NodePort answers on for family f: the family's, not the loopback
// (127.0.0.0/8, ::1; `fib daddr type local ip daddr != 127.0.0.0/8` in the
// nftables mode, which serves NodePorts on localhost only through
// --nodeport-addresses).
func servesNodePorts(a netip.Addr, f proxy.Family) bool {
	a = a.Unmap()
	return a.IsValid() && f.Contains(a) && !a.IsLoopback()
}

// resync lists the namespace's addresses and makes the map hold exactly
// those that serve NodePorts. It returns the number of map writes.
func (l *localAddrSet) resync() (int, error) {
	addrs, err := l.list()
	if err != nil {
		return 0, fmt.Errorf("list the node's %s addresses: %w", l.family, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.have == nil {
		// First run of this process: start from what the pinned map
		// holds (a restart keeps serving meanwhile).
		all, err := l.t.All()
		if err != nil {
			return 0, err
		}
		l.have = map[localAddr]bool{}
		for k := range all {
			l.have[k] = true
		}
	}
	want := map[localAddr]bool{}
	for _, a := range addrs {
		if servesNodePorts(a, l.family) {
			want[localAddr{Addr: addrWords(a.Unmap())}] = true
		}
	}
	n := 0
	for k := range want {
		if l.have[k] {
			continue
		}
		if err := l.t.Put(k, 1); err != nil {
			return n, fmt.Errorf("add local address %s: %w", wordsAddr(k.Addr, l.family), err)
		}
		l.have[k] = true
		n++
	}
	for k := range l.have {
		if want[k] {
			continue
		}
		if err := l.t.Delete(k); err != nil {
			return n, fmt.Errorf("remove local address %s: %w", wordsAddr(k.Addr, l.family), err)
		}
		delete(l.have, k)
		n++
	}
	return n, nil
}

// addrs lists what the map holds, sorted (for --dump and tests).
func (l *localAddrSet) addrs() []netip.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sortedAddrs(l.have, l.family)
}

// addrWatcher follows the address changes of a network namespace: after
// each burst of RTM_NEWADDR/RTM_DELADDR it calls onChange (which lists
// what it needs again: duplicate addresses and missed messages then cannot
// leave a stale entry). A failed subscription is reopened, with a full
// onChange, after resubscribeDelay.
type addrWatcher struct {
	cancel context.CancelFunc
	done   chan struct{}
}

const resubscribeDelay = time.Second

// watchAddrs starts following nsPath's addresses ("" is this process's
// namespace) until stop.
func watchAddrs(nsPath string, log *slog.Logger, onChange func()) (*addrWatcher, error) {
	ns := netns.None()
	if nsPath != "" {
		var err error
		if ns, err = netns.GetFromPath(nsPath); err != nil {
			return nil, fmt.Errorf("open network namespace %s to follow its addresses: %w", nsPath, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &addrWatcher{cancel: cancel, done: make(chan struct{})}
	subscribe := func() (<-chan netlink.AddrUpdate, chan struct{}, error) {
		ch, done := make(chan netlink.AddrUpdate, 64), make(chan struct{})
		err := netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{Namespace: &ns,
			ErrorCallback: func(err error) { log.Warn("address subscription", "err", err) }})
		if err != nil {
			close(done)
			return nil, nil, err
		}
		return ch, done, nil
	}
	ch, done, err := subscribe()
	if err != nil {
		cancel()
		ns.Close()
		return nil, fmt.Errorf("subscribe to the addresses of %s: %w", nsName(nsPath), err)
	}
	go func() {
		defer close(w.done)
		defer ns.Close()
		for {
			select {
			case <-ctx.Done():
				close(done)
				return
			case _, ok := <-ch:
				if ok {
					drain(ch)
					onChange()
					continue
				}
			}
			// The subscription failed (an overrun, most likely): events
			// may be lost, so reopen it and list everything again.
			close(done)
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(resubscribeDelay):
				}
				if ch, done, err = subscribe(); err == nil {
					break
				}
				log.Warn("resubscribe to address changes", "netns", nsName(nsPath), "err", err)
			}
			onChange()
		}
	}()
	return w, nil
}

// drain takes every update already queued: one onChange covers them.
func drain(ch <-chan netlink.AddrUpdate) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// stop ends the subscription and waits for the last onChange to return.
func (w *addrWatcher) stop() {
	if w == nil {
		return
	}
	w.cancel()
	<-w.done
}

func nsName(path string) string {
	if path == "" {
		return "this process's network namespace"
	}
	return path
}

// nsAddrs lists the addresses of nsPath's links ("" is this process's
// namespace).
func nsAddrs(nsPath string) ([]netip.Addr, error) {
	var out []netip.Addr
	err := inNetNSPath(nsPath, func() error {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
		return nil
	})
	return out, err
}

// inNetNSPath runs fn in the network namespace at path ("" is the
// process's own).
func inNetNSPath(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	return netnsutil.Do(path, fn)
}

// sortedAddrs are the addresses of set, sorted.
func sortedAddrs(set map[localAddr]bool, f proxy.Family) []netip.Addr {
	out := make([]netip.Addr, 0, len(set))
	for k := range set {
		out = append(out, wordsAddr(k.Addr, f))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// startLocalAddrs makes wildcard NodePorts follow the node namespace's
// addresses: the map is filled now and kept by an address subscription
// (and by every full sync, Sync).
func (d *DataPlane) startLocalAddrs(m *ebpf.Map) error {
	nsPath := d.cfg.NetNS
	d.local = newLocalAddrSet(d.cfg.Family, kernelTable[localAddr, uint8]{m},
		func() ([]netip.Addr, error) { return nsAddrs(nsPath) }, d.log)
	if _, err := d.local.resync(); err != nil {
		return err
	}
	w, err := watchAddrs(nsPath, d.log, d.addrsChanged)
	if err != nil {
		return err
	}
	d.watch = w
	return nil
}

// addrsChanged runs on the watcher's goroutine after the namespace's
// addresses changed. It must not take d.mu: closeLocked holds it while it
// waits for the watcher to stop.
func (d *DataPlane) addrsChanged() {
	if d.follow != nil {
		d.followInterfaces()
	}
	n, err := d.local.resync()
	if err != nil {
		d.log.Error("follow the node's addresses for wildcard NodePorts", "err", err)
		return
	}
	if n > 0 {
		d.log.Info("local addresses for wildcard NodePorts changed", "writes", n, "addresses", d.local.addrs())
	}
}
