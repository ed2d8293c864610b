package iptables

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
)

// TestLockContention: iptables-legacy commands wait for the xtables lock
// and, when another program holds it longer than lockWait, fail with
// ErrLocked; once it is released they succeed. The lock is a private file
// (XTABLES_LOCKFILE), so the host's iptables users are never blocked.
func TestLockContention(t *testing.T) {
	nettest.SkipShort(t, "waits for the lock timeout")
	requireBackends(t, IPv4)
	ns := nettest.New(t)
	lockFile := filepath.Join(t.TempDir(), "xtables.lock")
	f, err := os.Create(lockFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	r := New(Prefixed("env", "XTABLES_LOCKFILE="+lockFile, "ip", "netns", "exec", ns.Name()), IPv4, Legacy)
	ctx := t.Context()
	start := time.Now()
	var restoreErr, listErr error
	var wg sync.WaitGroup
	wg.Go(func() { restoreErr = r.Restore(ctx, []byte("*filter\n:NODENET-T - [0:0]\nCOMMIT\n")) })
	wg.Go(func() { _, _, listErr = r.ListChain(ctx, "filter", "INPUT") })
	wg.Wait()
	if waited := time.Since(start); waited < lockWait*time.Second {
		t.Errorf("gave up after %v, before the %ds wait", waited, lockWait)
	}
	for name, err := range map[string]error{"restore": restoreErr, "list": listErr} {
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "iptables-legacy") {
			t.Errorf("%s while the lock is held: %v, want ErrLocked naming the binary", name, err)
		}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := r.Restore(ctx, []byte("*filter\n:NODENET-T - [0:0]\nCOMMIT\n")); err != nil {
		t.Fatalf("restore after the lock was released: %v", err)
	}
}
