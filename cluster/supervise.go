package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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

	mu       sync.Mutex
	pid      int
	restarts int
	state    string
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

// supervise runs c until ctx ends, restarting it with backoff when it
// exits. On ctx end it sends SIGTERM, then SIGKILL after grace.
func (c *component) supervise(ctx context.Context, binary string, out io.Writer, grace time.Duration) {
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(out, "%s: %v\n", c.name, err)
			return
		}
		cmd := exec.Command(binary, c.args...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err = netnsutil.Start(c.netns, cmd)
		if err != nil {
			f.Close()
			c.set("failed", 0)
			fmt.Fprintf(out, "  [%s] start: %v\n", c.name, err)
		} else {
			c.set("running", cmd.Process.Pid)
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
			c.mu.Unlock()
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
