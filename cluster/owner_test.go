package cluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeUp starts the test binary with the argv of `nodenet up` (TestMain
// makes it sleep) and returns its pid and start time.
func fakeUp(t *testing.T) (*exec.Cmd, Owner) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Args = []string{"nodenet", "up", "--dir", t.TempDir()}
	cmd.Env = append(os.Environ(), "NODENET_TEST_FAKE_UP=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Until the child has exec'd, /proc shows the test binary's command
	// line (seen once in CI): wait for the one it was started with.
	cmdline := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "cmdline")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(cmdline); strings.HasPrefix(string(b), "nodenet\x00up\x00") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake up (pid %d) did not exec within 10s", cmd.Process.Pid)
		}
	}
	o, err := processOwner(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, o
}

func TestOwnerAlive(t *testing.T) {
	cmd, up := fakeUp(t)
	if !up.alive() {
		t.Fatalf("a running `nodenet up` (pid %d) is not alive", up.PID)
	}
	reused := up
	reused.StartTicks++ // same pid, another process: what pid reuse looks like
	if reused.alive() {
		t.Errorf("pid %d with another start time counts as the recorded up", up.PID)
	}
	self, err := processOwner(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.alive() {
		t.Errorf("a live process that is not `nodenet up` (the test binary) counts as an up")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if up.alive() {
		t.Errorf("a dead up counts as alive")
	}
	if (Owner{}).alive() {
		t.Errorf("pid 0 counts as alive")
	}
}

func TestLockOwnedRefusesSecondHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), lockFile)
	_, first := fakeUp(t)
	first.Name, first.Dir = "alpha", "/tmp/alpha"
	f, err := lockOwned(path, first)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockOwned(path, Owner{PID: 2, Name: "beta"})
	var running *RunningError
	if !errors.As(err, &running) || running.Owner != first {
		t.Fatalf("second lock: %v, want a RunningError naming %+v", err, first)
	}
	for _, want := range []string{`cluster "alpha" is running`, "pid " + strconv.Itoa(first.PID), "nodenet down --dir /tmp/alpha", "--replace"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	// Released (as when the holder dies), the lock is free again.
	f.Close()
	g, err := lockOwned(path, Owner{PID: 3})
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	g.Close()
}

func TestLockOwnedWhileHolderStarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), lockFile)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Holder has the lock but has not written itself yet.
	if err := flock(f); err != nil {
		t.Fatal(err)
	}
	_, err = lockOwned(path, Owner{PID: 2})
	if err == nil || !strings.Contains(err.Error(), "is starting") {
		t.Fatalf("lock held by a starting up: %v", err)
	}
}
