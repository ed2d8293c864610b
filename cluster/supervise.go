package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// component is one supervised process: the nodenet binary with a
// subcommand, started inside a namespace.
type component struct {
	name  string
	netns string // path of the namespace to start in
	args  []string
	log   string // log file
	// nice, when not 0, is the process's CPU priority (nice(1)): the
	// control plane's, which on a real cluster runs on machines of its
	// own, not on the nodes whose pod churn would otherwise starve it here.
	nice int

	mu       sync.Mutex
	pid      int
	restarts int
	state    string
	// held is non-nil while the component must not be (re)started (its
	// node is being restarted, restart.go); closed by release.
	held chan struct{}
}

// hold keeps supervise from starting the process again once it exits (or
// at all, if it is not running): whoever holds it kills and replaces what
// the process runs in, then calls release.
func (c *component) hold() {
	c.mu.Lock()
	if c.held == nil {
		c.held = make(chan struct{})
	}
	c.mu.Unlock()
}

// release lets supervise start the process again, at once.
func (c *component) release() {
	c.mu.Lock()
	if c.held != nil {
		close(c.held)
		c.held = nil
	}
	c.mu.Unlock()
}

// waitHeld blocks while the component is held; false when ctx ended.
func (c *component) waitHeld(ctx context.Context) (wasHeld, ok bool) {
	c.mu.Lock()
	h := c.held
	if h != nil {
		c.state, c.pid = "held", 0
	}
	c.mu.Unlock()
	if h == nil {
		return false, true
	}
	select {
	case <-ctx.Done():
		return true, false
	case <-h:
		return true, true
	}
}

// start starts cmd unless the component is held: under the lock hold
// takes, so once hold returns no new process appears.
func (c *component) start(cmd *exec.Cmd) (held bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		return true, nil
	}
	if err := netnsutil.Start(c.netns, cmd); err != nil {
		c.state, c.pid = "failed", 0
		return false, err
	}
	c.state, c.pid = "running", cmd.Process.Pid
	return false, nil
}

func (c *component) status() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%-22s %-8s pid %-7d restarts %d", c.name, c.state, c.pid, c.restarts)
}

func (c *component) set(state string, pid int) {
	c.mu.Lock()
	c.state, c.pid = state, pid
	c.mu.Unlock()
}

// command is the component's command line, through nice(1) when it has a
// priority of its own (nice execs the binary: the pid and /proc's cmdline
// are the component's). Without nice on PATH it runs at the default.
func (c *component) command(binary string) *exec.Cmd {
	if c.nice != 0 {
		if p, err := exec.LookPath("nice"); err == nil {
			return exec.Command(p, append([]string{"-n", strconv.Itoa(c.nice), binary}, c.args...)...)
		}
	}
	return exec.Command(binary, c.args...)
}

// supervise runs c until ctx ends, restarting it with backoff when it
// exits. On ctx end it sends SIGTERM, then SIGKILL after grace.
func (c *component) supervise(ctx context.Context, binary string, out io.Writer, grace time.Duration) {
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		if wasHeld, ok := c.waitHeld(ctx); !ok {
			return
		} else if wasHeld {
			backoff = 500 * time.Millisecond
		}
		f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", c.name, err)
			return
		}
		cmd := c.command(binary)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		held, err := c.start(cmd)
		if held {
			f.Close()
			continue
		}
		if err != nil {
			f.Close()
			fmt.Fprintf(out, "  [%s] start: %v\n", c.name, err)
		} else {
			started := time.Now()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err = <-done:
			case <-ctx.Done():
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-done:
				case <-time.After(grace):
					_ = cmd.Process.Kill()
					<-done
				}
				f.Close()
				c.set("stopped", 0)
				return
			}
			f.Close()
			c.mu.Lock()
			c.restarts++
			c.state, c.pid = "crashed", 0
			held := c.held != nil
			c.mu.Unlock()
			if held {
				// Killed by a node restart: started again on release.
				fmt.Fprintf(out, "  [%s] exited (%v) for a node restart\n", c.name, err)
				continue
			}
			fmt.Fprintf(out, "  [%s] exited (%v); restarting — see %s\n", c.name, err, c.log)
			if time.Since(started) > 30*time.Second {
				backoff = 500 * time.Millisecond
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func logPath(dir, name string) string { return filepath.Join(dir, "logs", name+".log") }
