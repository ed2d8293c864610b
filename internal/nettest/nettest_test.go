//go:build linux

package nettest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

func TestMain(m *testing.M) {
	os.Exit(CheckNoLeaks(m))
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		satisfied, strict bool
		want              action
	}{
		{true, false, run},
		{true, true, run},
		{false, false, skip},
		{false, true, fail},
	} {
		if got := decide(tc.satisfied, tc.strict); got != tc.want {
			t.Errorf("decide(satisfied=%v, strict=%v) = %v, want %v", tc.satisfied, tc.strict, got, tc.want)
		}
	}
}

func TestStrictFromEnv(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "0": false, "false": false, "FALSE": false,
		"1": true, "true": true, "yes": true, "on": true,
	} {
		if got := strictFromEnv(v); got != want {
			t.Errorf("strictFromEnv(%q) = %v, want %v", v, got, want)
		}
	}
}

// recordingTB captures what a gate did instead of ending the test.
type recordingTB struct {
	testing.TB
	skipped, fataled string
}

func (r *recordingTB) Helper()                   {}
func (r *recordingTB) Skipf(f string, a ...any)  { r.skipped = fmt.Sprintf(f, a...) }
func (r *recordingTB) Fatalf(f string, a ...any) { r.fataled = fmt.Sprintf(f, a...) }

func TestGate(t *testing.T) {
	problem := errors.New("no CAP_NET_ADMIN")
	for _, tc := range []struct {
		name     string
		problem  error
		strict   bool
		wantSkip bool
		wantFail bool
	}{
		{"satisfied", nil, false, false, false},
		{"satisfied strict", nil, true, false, false},
		{"unsatisfied", problem, false, true, false},
		{"unsatisfied strict", problem, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recordingTB{TB: t}
			gate(r, tc.problem, tc.strict)
			if (r.skipped != "") != tc.wantSkip || (r.fataled != "") != tc.wantFail {
				t.Fatalf("skipped=%q fataled=%q, want skip=%v fail=%v", r.skipped, r.fataled, tc.wantSkip, tc.wantFail)
			}
			for _, msg := range []string{r.skipped, r.fataled} {
				if msg != "" && !strings.Contains(msg, problem.Error()) {
					t.Errorf("message %q does not give the reason", msg)
				}
			}
		})
	}
}

func TestRequireToolMissing(t *testing.T) {
	r := &recordingTB{TB: t}
	RequireTool(r, "nodenet-no-such-tool")
	if strict() {
		if r.fataled == "" {
			t.Fatalf("strict mode: missing tool did not fail (skipped=%q)", r.skipped)
		}
	} else if r.skipped == "" {
		t.Fatalf("missing tool did not skip (fataled=%q)", r.fataled)
	}
}

func TestParseCapEff(t *testing.T) {
	status := "Name:\tx\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t0000000000001000\n"
	caps, err := parseCapEff(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if caps != 1<<capNetAdmin {
		t.Fatalf("caps = %#x, want only CAP_NET_ADMIN", caps)
	}
	if _, err := parseCapEff(strings.NewReader("Name:\tx\n")); err == nil {
		t.Fatal("missing CapEff line was accepted")
	}
}

func TestNewIsVisibleWithLoopbackUp(t *testing.T) {
	ip := RequireTool(t, "ip")
	ns := New(t)

	if len(ns.Name()) > 15 || !strings.HasPrefix(ns.Name(), Prefix) {
		t.Errorf("name %q: want prefix %q and at most 15 chars", ns.Name(), Prefix)
	}
	if ns.Path() != filepath.Join("/run/netns", ns.Name()) {
		t.Errorf("path = %q", ns.Path())
	}
	out, err := exec.Command(ip, "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v\n%s", err, out)
	}
	if !containsField(out, ns.Name()) {
		t.Fatalf("ip netns list does not show %s:\n%s", ns.Name(), out)
	}

	// Only lo may exist: anything else means we are looking at the host.
	links := strings.Fields(string(ns.MustExec(t, "ip", "-o", "link", "show")))
	if len(links) < 2 || links[1] != "lo:" || strings.Count(strings.Join(links, " "), ": <") != 1 {
		t.Fatalf("want exactly lo inside the namespace, got %v", links)
	}
	lo, err := ns.Handle().LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if lo.Attrs().Flags&net.FlagUp == 0 {
		t.Fatal("lo is down")
	}
	if out := ns.MustExec(t, "ip", "-o", "-4", "addr", "show", "dev", "lo"); !bytes.Contains(out, []byte("127.0.0.1")) {
		t.Fatalf("no 127.0.0.1 on lo:\n%s", out)
	}

	// A real round trip over 127.0.0.1 inside the namespace.
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go echoOnce(ln)
	var conn net.Conn
	if err := ns.Do(func() (err error) { conn, err = net.Dial("tcp", ln.Addr().String()); return }); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	roundTrip(t, conn, "loopback")
}

func TestLinkCarriesTCP(t *testing.T) {
	a, b := New(t), New(t)
	Link(t, a, "nnt-a0", "10.231.0.1/24", b, "nnt-b0", "10.231.0.2/24")
	addV6(t, a, "nnt-a0", "fd31::1/64")
	addV6(t, b, "nnt-b0", "fd31::2/64")

	// The pair must never have touched the root namespace.
	for _, n := range []string{"nnt-a0", "nnt-b0"} {
		if _, err := netlink.LinkByName(n); err == nil {
			t.Errorf("%s exists in the root namespace", n)
		}
	}

	for _, tc := range []struct{ listen, from, dial string }{
		{"10.231.0.1:0", "10.231.0.2", "10.231.0.1"},
		{"[fd31::1]:0", "fd31::2", "fd31::1"},
	} {
		t.Run(tc.dial, func(t *testing.T) {
			// The listening socket is created on a thread inside a and
			// stays there; accepting can happen on any thread.
			var ln net.Listener
			if err := a.Do(func() (err error) { ln, err = net.Listen("tcp", tc.listen); return }); err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			peers := make(chan net.Addr, 1)
			go func() { peers <- echoOnce(ln) }()

			_, port, _ := net.SplitHostPort(ln.Addr().String())
			var conn net.Conn
			err := b.Do(func() (err error) {
				d := net.Dialer{Timeout: 5 * time.Second}
				conn, err = d.Dial("tcp", net.JoinHostPort(tc.dial, port))
				return
			})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			roundTrip(t, conn, "over veth")

			select {
			case peer := <-peers:
				if host, _, _ := net.SplitHostPort(peer.String()); host != tc.from {
					t.Fatalf("listener saw peer %s, want %s", host, tc.from)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("listener never accepted")
			}
		})
	}
}

// TestDoRunsInsideAndRestores: NS.Do is netnsutil's Do (whose own tests
// cover the thread handling in depth, retirement included); this checks
// the wiring: the right namespace, fn's error and panic passed on.
func TestDoRunsInsideAndRestores(t *testing.T) {
	ns := New(t)
	want, err := netnsutil.InodeOf(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := netnsutil.InodeOf("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	err = ns.Do(func() error {
		cur, err := netnsutil.InodeOf("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		if cur != want {
			return fmt.Errorf("Do runs in %v, want %v", cur, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if after, err := netnsutil.InodeOf("/proc/thread-self/ns/net"); err != nil || after != before {
		t.Fatalf("caller's thread moved to %v (%v), want %v", after, err, before)
	}

	wantErr := errors.New("boom")
	if err := ns.Do(func() error { return wantErr }); !errors.Is(err, wantErr) {
		t.Fatalf("Do error = %v, want %v", err, wantErr)
	}
	func() {
		defer func() {
			if p := recover(); p != "kaboom" {
				t.Fatalf("recovered %v, want kaboom", p)
			}
		}()
		_ = ns.Do(func() error { panic("kaboom") })
	}()
}

func TestCleanupRemovesNamespace(t *testing.T) {
	RequirePrivileged(t)
	for _, tc := range []struct {
		name string
		end  func(t *testing.T)
	}{
		{"returns", func(*testing.T) {}},
		// SkipNow leaves through runtime.Goexit exactly like a failing
		// FailNow, without failing this test.
		{"goexit", func(t *testing.T) { t.SkipNow() }},
	} {
		var name, path string
		t.Run(tc.name, func(t *testing.T) {
			ns := New(t)
			name, path = ns.Name(), ns.Path()
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
			tc.end(t)
		})
		if name == "" {
			t.Fatalf("%s: subtest did not create a namespace", tc.name)
		}
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s still exists after cleanup (err=%v)", tc.name, path, err)
		}
		names, err := ListTestNamespaces()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if n == name {
				t.Errorf("%s: ListTestNamespaces still lists %s", tc.name, name)
			}
		}
	}
}

func TestListTestNamespaces(t *testing.T) {
	ns := New(t)
	names, err := ListTestNamespaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == ns.Name() {
			return
		}
	}
	t.Fatalf("ListTestNamespaces() = %v, missing %s", names, ns.Name())
}

func TestExecHonoursContext(t *testing.T) {
	ns := New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := ns.Exec(ctx, "sleep", "10"); err == nil {
		t.Fatal("sleep outlived its context")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("Exec ignored the context deadline")
	}
}

func addV6(t *testing.T, ns *NS, ifName, cidr string) {
	t.Helper()
	if err := configure(ns, ifName, cidr); err != nil {
		t.Fatal(err)
	}
}

func echoOnce(ln net.Listener) net.Addr {
	c, err := ln.Accept()
	if err != nil {
		return nil
	}
	defer c.Close()
	_, _ = io.Copy(c, io.LimitReader(c, 5))
	return c.RemoteAddr()
}

func roundTrip(t *testing.T, conn net.Conn, what string) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatalf("%s: write: %v", what, err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("%s: read %q, %v", what, buf, err)
	}
}

func containsField(out []byte, s string) bool {
	for _, f := range strings.Fields(string(out)) {
		if f == s {
			return true
		}
	}
	return false
}
