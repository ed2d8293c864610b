package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// One cluster, one `up`. A second `up` on the same state directory or the
// same cluster name would tear the first one's namespaces down (the stale
// state clean-up cannot tell a live cluster from a dead one), so the `up`
// that owns a cluster holds two flocks for its whole life:
//
//   - <dir>/up.lock: one `up` per state directory;
//   - /run/nodenet/<name>.lock: one `up` per cluster name, since the
//     namespaces nn-<name>-* are shared by every directory.
//
// A flock dies with its process, so a killed `up` leaves a stale state
// that the next `up` cleans up as before, and pid reuse cannot make a dead
// owner look alive. Both files record the owner (pid, start time, dir) so
// that a refused `up` can say who runs the cluster and `down` can stop it.

// nameLockDir holds the per-name locks; /run is a tmpfs, so nothing
// outlives a reboot, like the namespaces themselves.
const nameLockDir = "/run/nodenet"

// Owner is the `nodenet up` process running a cluster.
type Owner struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"startTicks"` // /proc/<pid>/stat starttime: tells a reused pid apart
	Name       string `json:"name"`
	Dir        string `json:"dir"`
}

// RunningError is returned when a live `up` owns the cluster.
type RunningError struct {
	Owner   Owner
	APIPort int // 0 while the owner is still starting
}

func (e *RunningError) Error() string {
	o := e.Owner
	var b strings.Builder
	fmt.Fprintf(&b, "cluster %q is running: nodenet up pid %d owns it (state in %s)", o.Name, o.PID, o.Dir)
	if e.APIPort != 0 {
		fmt.Fprintf(&b, "\n  reach it:  kubectl --kubeconfig %s get nodes -o wide   (API https://127.0.0.1:%d)", filepath.Join(o.Dir, "admin.kubeconfig"), e.APIPort)
		fmt.Fprintf(&b, "\n             nodenet status --dir %s", o.Dir)
	} else {
		b.WriteString(" and is still starting")
	}
	fmt.Fprintf(&b, "\n  remove it: nodenet down --dir %s   (or: nodenet up --replace …)", o.Dir)
	return b.String()
}

// claim is what Up holds while it owns a cluster.
type claim struct {
	self  Owner
	files []*os.File
}

// release unlocks; the name lock file is removed first (acquire re-checks
// the inode it locked, so removal cannot let two owners in).
func (c *claim) release() {
	for _, f := range c.files {
		if strings.HasPrefix(f.Name(), nameLockDir) {
			_ = os.Remove(f.Name())
		}
		_ = f.Close()
	}
	c.files = nil
}

// claimCluster takes both locks for cfg without blocking, or returns a
// *RunningError naming the owner. It changes nothing else.
func claimCluster(name, dir string) (*claim, error) {
	self, err := processOwner(os.Getpid())
	if err != nil {
		return nil, err
	}
	self.Name, self.Dir = name, dir
	c := &claim{self: self}
	// The name first: refused on it, a new state directory is not even
	// created.
	for _, path := range []string{filepath.Join(nameLockDir, name+".lock"), filepath.Join(dir, lockFile)} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			c.release()
			return nil, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
		}
		f, err := lockOwned(path, self)
		if err != nil {
			c.release()
			return nil, err
		}
		c.files = append(c.files, f)
	}
	// A state written by an `up` that predates the locks: trust its pid
	// only if that process is still the same `nodenet up`.
	if st, err := ReadState(dir); err == nil && st.PID != os.Getpid() {
		o := Owner{PID: st.PID, StartTicks: st.StartTicks, Name: st.Name, Dir: dir}
		if o.alive() {
			c.release()
			return nil, &RunningError{Owner: o, APIPort: st.APIPort}
		}
	}
	return c, nil
}

// claimOrReplace claims the cluster; with cfg.Replace it first stops the
// live `up` that owns it (by dir or by name).
func claimOrReplace(cfg Config) (*claim, error) {
	c, err := claimCluster(cfg.Name, cfg.Dir)
	var running *RunningError
	if !cfg.Replace || !errors.As(err, &running) {
		return c, err
	}
	pid, err := Stop(running.Owner.Dir, stopTimeout)
	if err != nil {
		return nil, fmt.Errorf("replace cluster %q: %w", running.Owner.Name, err)
	}
	fmt.Fprintf(cfg.Out, "replacing: stopped nodenet up pid %d (cluster %q, state in %s)\n", pid, running.Owner.Name, running.Owner.Dir)
	return claimCluster(cfg.Name, cfg.Dir)
}

// stopTimeout is how long Stop waits for an `up` to tear its cluster down
// (its components get 10s each to stop, in parallel).
const stopTimeout = 90 * time.Second

// listenAPI opens the root namespace's API forwarder port, refusing with
// advice when another program holds it.
func listenAPI(port int) (net.Listener, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s is already in use by another program (another API server or nodenet cluster?); nothing was changed: choose a free port with --api-port N, or --api-port 0 for any", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s for the API forwarder: %w", addr, err)
	}
	return ln, nil
}

// lockOwned flocks path and records self in it, or returns a
// *RunningError built from what the holder recorded.
func lockOwned(path string, self Owner) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open lock %s: %w", path, err)
		}
		if err := flock(f); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, runningFrom(path)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// The previous holder may have removed the file between our open
		// and our flock; a lock on an unlinked inode guards nothing.
		var held, named syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Stat(path, &named) == nil && held.Ino == named.Ino {
			b, _ := json.Marshal(self)
			if err := f.Truncate(0); err == nil {
				_, err = f.WriteAt(b, 0)
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("record owner in %s: %w", path, err)
			}
			return f, nil
		}
		f.Close()
	}
}

// flock takes f's exclusive lock without waiting: a held lock means a
// live owner, and waiting for it would only hide that.
func flock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }

// runningFrom describes the holder of the lock at path.
func runningFrom(path string) error {
	var o Owner
	b, _ := os.ReadFile(path)
	if json.Unmarshal(b, &o) != nil || o.PID == 0 {
		return fmt.Errorf("another nodenet up holds %s and is starting; try again in a moment", path)
	}
	e := &RunningError{Owner: o}
	if st, err := ReadState(o.Dir); err == nil && st.PID == o.PID {
		e.APIPort = st.APIPort
	}
	return e
}

// processOwner reads pid's identity from /proc.
func processOwner(pid int) (Owner, error) {
	ticks, err := startTicks(pid)
	if err != nil {
		return Owner{}, err
	}
	return Owner{PID: pid, StartTicks: ticks}, nil
}

// startTicks is field 22 of /proc/<pid>/stat, the process start time in
// clock ticks since boot; with the pid it names one process for good.
func startTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read process %d: %w", pid, err)
	}
	// comm (field 2) may hold spaces and parentheses: fields are counted
	// from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	fields := strings.Fields(string(b[i+1:]))
	if i < 0 || len(fields) < 20 {
		return 0, fmt.Errorf("process %d: unexpected /proc stat %q", pid, b)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive reports whether o still runs and is a `nodenet up`: same pid, same
// start time (not a reused pid), and "up" as the subcommand.
func (o Owner) alive() bool {
	if o.PID <= 0 {
		return false
	}
	if t, err := startTicks(o.PID); err != nil || t != o.StartTicks {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(o.PID), "cmdline"))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	return len(args) > 1 && args[1] == "up"
}

// Stop ends the live `up` of the cluster in dir, if there is one, and
// waits for it to tear its cluster down. It returns the pid it stopped
// (0: none was running).
func Stop(dir string, timeout time.Duration) (int, error) {
	o, ok := liveOwner(dir)
	if !ok {
		return 0, nil
	}
	if err := syscall.Kill(o.PID, syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("stop nodenet up pid %d: %w", o.PID, err)
	}
	for deadline := time.Now().Add(timeout); o.alive(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			// Down removes whatever it left behind.
			_ = syscall.Kill(o.PID, syscall.SIGKILL)
			time.Sleep(200 * time.Millisecond)
			break
		}
	}
	return o.PID, nil
}

// liveOwner finds the live `up` of dir from its lock or its cluster.json.
func liveOwner(dir string) (Owner, bool) {
	var o Owner
	if b, err := os.ReadFile(filepath.Join(dir, lockFile)); err == nil && json.Unmarshal(b, &o) == nil && o.alive() {
		return o, true
	}
	if st, err := ReadState(dir); err == nil {
		o = Owner{PID: st.PID, StartTicks: st.StartTicks, Name: st.Name, Dir: dir}
		return o, o.alive()
	}
	return Owner{}, false
}
