package netnsutil_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/nettest"
)

func TestMain(m *testing.M) {
	os.Exit(nettest.CheckNoLeaks(m))
}

func TestPath(t *testing.T) {
	for in, want := range map[string]string{
		"":                "",
		"vpc":             "/run/netns/vpc",
		"/run/netns/vpc":  "/run/netns/vpc",
		"/proc/1/ns/net":  "/proc/1/ns/net",
		"./relative/path": "./relative/path",
	} {
		if got := netnsutil.Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
}

// threadNetns identifies the namespace of the calling goroutine's thread;
// only meaningful while the goroutine is locked to it.
func threadNetns(t *testing.T) netnsutil.Inode {
	t.Helper()
	ino, err := netnsutil.InodeOf("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

func mustInode(t *testing.T, path string) netnsutil.Inode {
	t.Helper()
	ino, err := netnsutil.InodeOf(path)
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// TestDoRunsElsewhereAndRestores: fn runs in the namespace on a thread
// other than the caller's; the caller's thread never changes namespace;
// fn's thread is back where it was afterwards; sockets stay inside.
func TestDoRunsElsewhereAndRestores(t *testing.T) {
	ns := nettest.New(t)
	want := mustInode(t, ns.Path())

	// Pin the caller to its thread so "the caller's thread" is observable.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	callerTid, callerNs := unix.Gettid(), threadNetns(t)

	var fnTid int
	var inside netnsutil.Inode
	var ln net.Listener
	err := netnsutil.Do(ns.Path(), func() error {
		fnTid = unix.Gettid()
		var err error
		if inside, err = netnsutil.InodeOf("/proc/thread-self/ns/net"); err != nil {
			return err
		}
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if inside != want {
		t.Fatalf("fn ran in %v, want the namespace %v", inside, want)
	}
	if fnTid == callerTid {
		t.Fatal("fn ran on the caller's own thread")
	}
	if unix.Gettid() != callerTid || threadNetns(t) != callerNs {
		t.Fatal("the caller's thread was moved")
	}
	back, err := netnsutil.InodeOf(fmt.Sprintf("/proc/self/task/%d/ns/net", fnTid))
	if err != nil {
		t.Fatalf("fn's thread %d is gone after a successful Do: %v", fnTid, err)
	}
	if back != callerNs {
		t.Fatalf("fn's thread %d left in %v, want %v", fnTid, back, callerNs)
	}

	// The listener lives in the namespace: reachable from inside.
	err = netnsutil.Do(ns.Path(), func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		t.Fatalf("dial the listener from inside: %v", err)
	}
}

func TestDoReturnsFnErrorAndPanic(t *testing.T) {
	ns := nettest.New(t)
	boom := errors.New("boom")
	if err := netnsutil.Do(ns.Path(), func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	func() {
		defer func() {
			if p := recover(); p != "kaboom" {
				t.Fatalf("recovered %v, want kaboom", p)
			}
		}()
		_ = netnsutil.Do(ns.Path(), func() error { panic("kaboom") })
		t.Fatal("a panic in fn did not reach the caller")
	}()
}

// TestOpenRejects needs no privilege: opening files is enough.
func TestOpenRejects(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "stale")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
	}{
		{filepath.Join(t.TempDir(), "missing"), fs.ErrNotExist},
		{plain, netnsutil.ErrNotNamespace},
		// A namespace file, but not a network namespace's.
		{"/proc/self/ns/mnt", netnsutil.ErrNotNamespace},
	} {
		if ns, err := netnsutil.Open(tc.path); !errors.Is(err, tc.want) {
			if ns != nil {
				ns.Close()
			}
			t.Errorf("Open(%s) = %v, want %v", tc.path, err, tc.want)
		}
		ran := false
		if err := netnsutil.Do(tc.path, func() error { ran = true; return nil }); !errors.Is(err, tc.want) || ran {
			t.Errorf("Do(%s) = %v (fn ran: %v), want %v and fn not run", tc.path, err, ran, tc.want)
		}
	}
	ns, err := netnsutil.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatalf("Open of our own namespace: %v", err)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNamesNotPaths(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "/etc/passwd"} {
		if _, err := netnsutil.Create(name); err == nil {
			t.Errorf("Create(%q) accepted a path", name)
		}
		if err := netnsutil.Delete(name); err == nil {
			t.Errorf("Delete(%q) accepted a path", name)
		}
	}
}

// uniqueName is a name with nettest's prefix, so `make test` flags it if
// it is left behind; t.Cleanup deletes it.
func uniqueName(t *testing.T) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := nettest.Prefix + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		if err := netnsutil.Delete(name); err != nil {
			t.Error(err)
		}
	})
	return name
}

func TestCreateDeleteIdempotent(t *testing.T) {
	nettest.RequirePrivileged(t)
	name := uniqueName(t)

	path, err := netnsutil.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(netnsutil.Dir, name) || netnsutil.Path(name) != path {
		t.Fatalf("Create path = %q, Path = %q", path, netnsutil.Path(name))
	}
	first := mustInode(t, path)
	if first == mustInode(t, "/proc/self/ns/net") {
		t.Fatal("Create returned the caller's own namespace")
	}
	again, err := netnsutil.Create(name)
	if err != nil || again != path {
		t.Fatalf("second Create = %q, %v", again, err)
	}
	if mustInode(t, path) != first {
		t.Fatal("second Create replaced the namespace instead of reusing it")
	}
	if names, err := netnsutil.List(name); err != nil || len(names) != 1 || names[0] != name {
		t.Fatalf("List(%q) = %v, %v", name, names, err)
	}
	checkLoopbackUp(t, path)

	for range 2 {
		if err := netnsutil.Delete(name); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s still exists after Delete: %v", path, err)
		}
		if mounted(t, path) {
			t.Fatalf("%s still mounted after Delete", path)
		}
	}
}

// TestCreateOverPlaceholder: a plain file under the name (a claim, or a
// mount point left by a crash) becomes the namespace.
func TestCreateOverPlaceholder(t *testing.T) {
	nettest.RequirePrivileged(t)
	name := uniqueName(t)
	f, err := os.OpenFile(filepath.Join(netnsutil.Dir, name), os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	path, err := netnsutil.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netnsutil.Open(path)
	if err != nil {
		t.Fatalf("placeholder was not mounted over: %v", err)
	}
	ns.Close()
}

func TestDoPrivate(t *testing.T) {
	nettest.RequirePrivileged(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	callerNs := threadNetns(t)

	var inside netnsutil.Inode
	err := netnsutil.DoPrivate(func() error {
		var err error
		if inside, err = netnsutil.InodeOf("/proc/thread-self/ns/net"); err != nil {
			return err
		}
		return loopbackUp()
	})
	if err != nil {
		t.Fatal(err)
	}
	if inside == callerNs {
		t.Fatal("DoPrivate ran fn in the caller's namespace")
	}
	if threadNetns(t) != callerNs {
		t.Fatal("the caller's thread was moved")
	}
	names, err := netnsutil.List("")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if ino, err := netnsutil.InodeOf(netnsutil.Path(n)); err == nil && ino == inside {
			t.Fatalf("the private namespace is mounted as %s", n)
		}
	}
	boom := errors.New("boom")
	if err := netnsutil.DoPrivate(func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("DoPrivate = %v, want fn's error", err)
	}
}

func TestStartForksInside(t *testing.T) {
	readlink := nettest.RequireTool(t, "readlink")
	ns := nettest.New(t)
	cmd := exec.Command(readlink, "/proc/self/ns/net")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := netnsutil.Start(ns.Path(), cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("net:[%d]", mustInode(t, ns.Path()).Ino)
	if got := strings.TrimSpace(out.String()); got != want {
		t.Fatalf("child's namespace = %s, want %s", got, want)
	}
}

func TestDoRetiresThreadWhenRestoreFails(t *testing.T) {
	nsT := nettest.New(t)
	ns, err := netnsutil.Open(nsT.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	restoreErr := errors.New("injected restore failure")
	undo := netnsutil.SetSetns(func(fd, nstype int) error {
		if fd == ns.Fd() {
			return unix.Setns(fd, nstype)
		}
		return restoreErr
	})
	defer undo()

	// If Do lands on the main thread the runtime wedges it instead of
	// exiting it: still never reused, but not observable. That can happen
	// only once per process, so a second attempt lands elsewhere.
	var tid int
	for range 3 {
		err := ns.Do(func() error { tid = unix.Gettid(); return nil })
		if !errors.Is(err, restoreErr) {
			t.Fatalf("Do error = %v, want the restore failure", err)
		}
		if tid != os.Getpid() {
			break
		}
	}
	undo()
	if tid == os.Getpid() {
		t.Fatal("Do kept running on the wedged main thread")
	}
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(task); errors.Is(err, fs.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still alive in a foreign namespace", tid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkLoopbackUp: lo is up and 127.0.0.1 carries a connection inside the
// namespace at path.
func checkLoopbackUp(t *testing.T, path string) {
	t.Helper()
	if err := netnsutil.Do(path, loopbackUp); err != nil {
		t.Fatal(err)
	}
}

func loopbackUp() error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}
	if lo.Flags&net.FlagUp == 0 {
		return errors.New("lo is down")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		return fmt.Errorf("loopback connection: %w", err)
	}
	return c.Close()
}

// mounted reports whether path is a mount point in our mount namespace.
func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
