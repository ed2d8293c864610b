//go:build linux

package nettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

const (
	// runDir is where iproute2 looks, so `ip netns list/exec` see our
	// namespaces.
	runDir = "/run/netns"
	// Prefix marks namespaces created by this package; leak checks and
	// humans cleaning up by hand rely on it.
	Prefix = "nnt-"
)

// NS is a named network namespace that lives until the test that created it
// finishes.
type NS struct {
	name   string
	path   string
	handle netns.NsHandle
	nl     *netlink.Handle
}

// Name is the iproute2 name, usable with `ip netns exec`.
func (ns *NS) Name() string { return ns.name }

// Path is the bind-mounted namespace file under /run/netns.
func (ns *NS) Path() string { return ns.path }

// Fd is an open handle on the namespace, valid until cleanup, for APIs
// that want one (netlink.NsFd, setns).
func (ns *NS) Fd() int { return int(ns.handle) }

// Handle returns a netlink handle whose sockets live in the namespace, so
// calls on it never touch the root namespace. It is closed at cleanup.
func (ns *NS) Handle() *netlink.Handle { return ns.nl }

// New creates a namespace with loopback up and removes it in t.Cleanup. It
// gates on RequirePrivileged first.
func New(t testing.TB) *NS {
	t.Helper()
	RequirePrivileged(t)
	ns, err := create()
	if err != nil {
		t.Fatalf("nettest: %v", err)
	}
	t.Cleanup(func() {
		if err := ns.destroy(); err != nil {
			t.Errorf("nettest: %v", err)
		}
	})
	return ns
}

// Do runs fn on an OS thread switched into the namespace. Sockets fn opens
// stay in the namespace after Do returns. Goroutines fn starts run
// elsewhere, and fn must report failure by returning an error rather than
// calling t.FailNow, because it runs on its own goroutine. A panic in fn is
// re-raised in the caller after the thread has been restored.
func (ns *NS) Do(fn func() error) error {
	return onThread(func() error {
		if err := setns(ns.handle); err != nil {
			return fmt.Errorf("enter netns %s: %w", ns.name, err)
		}
		return fn()
	})
}

// Exec runs a command inside the namespace via `ip netns exec`, which also
// gives it a matching /sys, and returns its combined output.
func (ns *NS) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	argv := append([]string{"netns", "exec", ns.name, name}, args...)
	out, err := exec.CommandContext(ctx, "ip", argv...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("exec %s in netns %s: %w", strings.Join(append([]string{name}, args...), " "), ns.name, err)
	}
	return out, nil
}

// MustExec is Exec that fails the test, showing the output, on error.
func (ns *NS) MustExec(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	out, err := ns.Exec(t.Context(), name, args...)
	if err != nil {
		t.Fatalf("nettest: %v\n%s", err, out)
	}
	return out
}

// Link connects a and b with a veth pair named aIf (in a) and bIf (in b),
// assigns the optional CIDR addresses and brings both ends up. The pair is
// created directly in a, so it never appears in the root namespace, and it
// disappears with the namespaces.
func Link(t testing.TB, a *NS, aIf, aAddr string, b *NS, bIf, bAddr string) {
	t.Helper()
	if err := link(a, aIf, aAddr, b, bIf, bAddr); err != nil {
		t.Fatalf("nettest: %v", err)
	}
}

func link(a *NS, aIf, aAddr string, b *NS, bIf, bAddr string) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: aIf},
		PeerName:      bIf,
		PeerNamespace: netlink.NsFd(b.handle),
	}
	if err := a.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s@%s <-> %s@%s: %w", aIf, a.name, bIf, b.name, err)
	}
	if err := configure(a, aIf, aAddr); err != nil {
		return err
	}
	return configure(b, bIf, bAddr)
}

func configure(ns *NS, ifName, cidr string) error {
	l, err := ns.nl.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("find %s in netns %s: %w", ifName, ns.name, err)
	}
	if cidr != "" {
		addr, err := netlink.ParseAddr(cidr)
		if err != nil {
			return fmt.Errorf("parse address %q: %w", cidr, err)
		}
		if addr.IP.To4() == nil {
			// Without this an IPv6 address is tentative for a second or
			// more and binding to it fails.
			addr.Flags |= syscall.IFA_F_NODAD
		}
		if err := ns.nl.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("add %s to %s in netns %s: %w", cidr, ifName, ns.name, err)
		}
	}
	if err := ns.nl.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up in netns %s: %w", ifName, ns.name, err)
	}
	return nil
}

// ListTestNamespaces returns the names under /run/netns that carry Prefix,
// whichever process created them.
func ListTestNamespaces() ([]string, error) {
	entries, err := os.ReadDir(runDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", runDir, err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), Prefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// CheckNoLeaks runs the tests and then fails the binary if a namespace it
// created is still mounted, removing the leftovers so one bad run does not
// poison the next. Use it as os.Exit(nettest.CheckNoLeaks(m)).
//
// Only this process's namespaces count: `go test ./...` runs packages in
// parallel, and another package's live namespaces are not leaks.
func CheckNoLeaks(m *testing.M) int {
	code := m.Run()
	leaked := leakedNamespaces()
	if len(leaked) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "nettest: network namespaces leaked by this test binary: %s\n", strings.Join(leaked, " "))
	for _, name := range leaked {
		ns := &NS{name: name, path: filepath.Join(runDir, name), handle: netns.None()}
		if err := ns.destroy(); err != nil {
			fmt.Fprintf(os.Stderr, "nettest: %v\n", err)
		}
	}
	if code == 0 {
		code = 1
	}
	return code
}

// created records every name this process claimed, before mounting, so a
// failure between claiming and cleanup registration cannot hide a leak.
var created struct {
	sync.Mutex
	names map[string]struct{}
}

func register(name string) {
	created.Lock()
	defer created.Unlock()
	if created.names == nil {
		created.names = make(map[string]struct{})
	}
	created.names[name] = struct{}{}
}

func leakedNamespaces() []string {
	created.Lock()
	defer created.Unlock()
	var leaked []string
	for name := range created.names {
		if _, err := os.Lstat(filepath.Join(runDir, name)); err == nil {
			leaked = append(leaked, name)
		}
	}
	sort.Strings(leaked)
	return leaked
}

func create() (*NS, error) {
	if err := prepareRunDir(); err != nil {
		return nil, err
	}
	name, err := reserveName()
	if err != nil {
		return nil, err
	}
	ns := &NS{name: name, path: filepath.Join(runDir, name), handle: netns.None()}
	if err := ns.mount(); err != nil {
		return nil, errors.Join(fmt.Errorf("create netns %s: %w", name, err), ns.destroy())
	}
	if err := ns.open(); err != nil {
		return nil, errors.Join(fmt.Errorf("create netns %s: %w", name, err), ns.destroy())
	}
	return ns, nil
}

// reserveName claims a fresh file under /run/netns. O_EXCL makes the claim
// safe against other test binaries running at the same time.
func reserveName() (string, error) {
	var lastErr error
	for range 8 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("random netns name: %w", err)
		}
		name := Prefix + hex.EncodeToString(b[:])
		f, err := os.OpenFile(filepath.Join(runDir, name), os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0)
		if err == nil {
			register(name)
			return name, f.Close()
		}
		lastErr = err
		if !errors.Is(err, os.ErrExist) {
			break
		}
	}
	return "", fmt.Errorf("create netns file: %w", lastErr)
}

// prepareRunDir sets /run/netns up the way iproute2 does: a shared mount
// point, so namespaces mounted later also show up in mount namespaces
// cloned earlier (e.g. by `ip netns exec` or a container runtime). The flock
// stops two test binaries from stacking bind mounts on top of each other.
func prepareRunDir() error {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", runDir, err)
	}
	dir, err := os.Open(runDir)
	if err != nil {
		return fmt.Errorf("open %s: %w", runDir, err)
	}
	defer dir.Close()
	if err := syscall.Flock(int(dir.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", runDir, err)
	}
	err = syscall.Mount("", runDir, "none", syscall.MS_SHARED|syscall.MS_REC, "")
	if errors.Is(err, syscall.EINVAL) {
		// Not a mount point yet; make it one and retry.
		if err := syscall.Mount(runDir, runDir, "none", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind mount %s: %w", runDir, err)
		}
		err = syscall.Mount("", runDir, "none", syscall.MS_SHARED|syscall.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make %s shared: %w", runDir, err)
	}
	return nil
}

// mount unshares a fresh namespace on a locked thread and pins it by bind
// mounting the thread's ns file, then returns the thread to where it was.
func (ns *NS) mount() error {
	return onThread(func() error {
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid())
		if err := syscall.Mount(self, ns.path, "none", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %s: %w", self, err)
		}
		return nil
	})
}

// open takes the handles tests use and brings loopback up, because nearly
// every test expects 127.0.0.1 to work.
func (ns *NS) open() error {
	h, err := netns.GetFromPath(ns.path)
	if err != nil {
		return fmt.Errorf("open %s: %w", ns.path, err)
	}
	ns.handle = h
	// netlink.NewHandleAt switches namespaces itself and unlocks the thread
	// even if switching back fails; creating the handle under Do keeps that
	// decision ours.
	return ns.Do(func() error {
		nl, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("netlink handle: %w", err)
		}
		ns.nl = nl
		lo, err := nl.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("find lo: %w", err)
		}
		if err := nl.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
		return nil
	})
}

// destroy is idempotent and tolerates a half-created namespace, so it can
// serve both cleanup and error paths.
func (ns *NS) destroy() error {
	if ns.nl != nil {
		ns.nl.Close()
		ns.nl = nil
	}
	var errs []error
	if ns.handle.IsOpen() {
		if err := ns.handle.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close: %w", err))
		}
		ns.handle = netns.None()
	}
	// MNT_DETACH because a process still inside (say, a stray `ip netns
	// exec` child) would make a plain unmount fail with EBUSY.
	if err := syscall.Unmount(ns.path, syscall.MNT_DETACH); err != nil &&
		!errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount: %w", err))
	}
	if err := os.Remove(ns.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete netns %s: %w", ns.name, err)
	}
	return nil
}

// setns is a variable so tests can make restoring a thread fail.
var setns = netns.Set

// onThread runs fn on a fresh goroutine locked to its OS thread, then moves
// the thread back to the namespace it started in. If that fails the
// goroutine exits still locked, which makes the runtime retire the thread
// rather than reuse it in the wrong namespace.
func onThread(fn func() error) error {
	type result struct {
		err      error
		panicked bool
		panicVal any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("get current netns: %w", err)}
			return
		}
		defer orig.Close()
		var r result
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.panicked, r.panicVal = true, p
				}
			}()
			r.err = fn()
		}()
		if err := setns(orig); err != nil {
			r.err = errors.Join(r.err, fmt.Errorf("restore netns (thread retired): %w", err))
			done <- r
			return
		}
		runtime.UnlockOSThread()
		done <- r
	}()
	r := <-done
	if r.panicked {
		panic(r.panicVal)
	}
	return r.err
}
