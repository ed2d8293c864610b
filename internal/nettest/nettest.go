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
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// Prefix marks namespaces created by this package; leak checks and humans
// cleaning up by hand rely on it.
const Prefix = "nnt-"

// NS is a named network namespace that lives until the test that created it
// finishes.
type NS struct {
	name string
	path string
	ns   *netnsutil.Namespace // nil until opened
	nl   *netlink.Handle
}

// Name is the iproute2 name, usable with `ip netns exec`.
func (ns *NS) Name() string { return ns.name }

// Path is the bind-mounted namespace file under /run/netns
// (netnsutil.Dir).
func (ns *NS) Path() string { return ns.path }

// Fd is an open handle on the namespace, valid until cleanup, for APIs
// that want one (netlink.NsFd, setns).
func (ns *NS) Fd() int { return ns.ns.Fd() }

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
// re-raised in the caller after the thread has been restored. It is
// netnsutil's Do on the open namespace.
func (ns *NS) Do(fn func() error) error { return ns.ns.Do(fn) }

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
		PeerNamespace: netlink.NsFd(b.Fd()),
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
func ListTestNamespaces() ([]string, error) { return netnsutil.List(Prefix) }

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
		ns := &NS{name: name, path: netnsutil.Path(name)}
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
		if _, err := os.Lstat(netnsutil.Path(name)); err == nil {
			leaked = append(leaked, name)
		}
	}
	sort.Strings(leaked)
	return leaked
}

// create makes a namespace under a fresh name: reserveName claims the name,
// then netnsutil.Create mounts the namespace (loopback up) over the claim.
func create() (*NS, error) {
	name, err := reserveName()
	if err != nil {
		return nil, err
	}
	ns := &NS{name: name, path: netnsutil.Path(name)}
	if _, err := netnsutil.Create(name); err != nil {
		return nil, errors.Join(err, ns.destroy())
	}
	if err := ns.open(); err != nil {
		return nil, errors.Join(fmt.Errorf("create netns %s: %w", name, err), ns.destroy())
	}
	return ns, nil
}

// reserveName claims a fresh file under /run/netns. O_EXCL makes the claim
// safe against other test binaries running at the same time: netnsutil.Create
// alone would reuse a namespace of the same name.
func reserveName() (string, error) {
	if err := os.MkdirAll(netnsutil.Dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", netnsutil.Dir, err)
	}
	var lastErr error
	for range 8 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("random netns name: %w", err)
		}
		name := Prefix + hex.EncodeToString(b[:])
		f, err := os.OpenFile(netnsutil.Path(name), os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0)
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

// open takes the handles tests use: the namespace file and a netlink
// handle inside. (routes.OpenHandle would do the latter, but routes' own
// tests use this package.)
func (ns *NS) open() error {
	n, err := netnsutil.Open(ns.path)
	if err != nil {
		return err
	}
	ns.ns = n
	return ns.Do(func() error {
		nl, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("netlink handle: %w", err)
		}
		ns.nl = nl
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
	if ns.ns != nil {
		if err := ns.ns.Close(); err != nil {
			errs = append(errs, err)
		}
		ns.ns = nil
	}
	if err := netnsutil.Delete(ns.name); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
