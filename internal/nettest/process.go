package nettest

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Process is a program a test runs inside a namespace (an upstream daemon,
// say), with its combined output kept for assertions and failure reports.
type Process struct {
	out  Buffer
	err  error
	done chan struct{}
}

// StartProcess runs name with args inside ns (through `ip netns exec`, so
// it also sees the namespace's /etc/netns files), with env added to the
// test's environment. t.Cleanup stops it: SIGTERM to its own process group
// (exactly what the test started, nothing found by name), SIGKILL after 10 s.
func StartProcess(t testing.TB, ns *NS, env []string, name string, args ...string) *Process {
	t.Helper()
	p := &Process{done: make(chan struct{})}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name(), name}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = p, p
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s in %s: %v", name, ns.Name(), err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

func (p *Process) Write(b []byte) (int, error) {
	return p.out.Write(b)
}

// Log is everything the process wrote so far.
func (p *Process) Log() string {
	return p.out.String()
}

// Exited is nil while the process runs, and why it stopped once it has
// (a daemon that exits, even with status 0, has failed its test).
func (p *Process) Exited() error {
	select {
	case <-p.done:
		if p.err == nil {
			return errors.New("exited with status 0")
		}
		return p.err
	default:
		return nil
	}
}
