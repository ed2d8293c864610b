package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// ReadState reads <dir>/cluster.json.
func ReadState(dir string) (State, error) {
	var st State
	b, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// Down removes a cluster: every process in its namespaces (components and
// pods), the namespaces with their mounts and veths, the nodes' bpffs and
// cgroup mounts and their cgroups, and the state under
// dir (logs too unless keepLogs). name may be empty to take it from
// <dir>/cluster.json. It is idempotent.
func Down(dir, name string, keepLogs bool) error {
	if name == "" {
		st, err := ReadState(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read cluster state: %w", err)
		}
		name = st.Name
	}
	if name == "" {
		return errors.New("cluster name unknown")
	}
	names, err := netnsutil.List(Prefix(name))
	if err != nil {
		return err
	}
	if err := removeNetns(names); err != nil {
		return err
	}
	// The nodes' bpffs and cgroup mounts go before anything below dir is
	// removed, the node cgroups once their pods are gone (nodemounts.go).
	if err := errors.Join(unmountUnder(dir), removeNodeCgroups(name)); err != nil {
		return err
	}
	ents, _ := os.ReadDir(dir)
	var errs []error
	for _, e := range ents {
		// The lock stays: its holder (an up cleaning a stale state, or
		// DownLive) still relies on it; see owner.go.
		if keepLogs && e.Name() == "logs" || e.Name() == lockFile {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if !keepLogs {
		_ = os.Remove(filepath.Join(dir, lockFile))
		_ = os.Remove(dir)
	}
	return errors.Join(errs...)
}

// DownLive is `nodenet down`: it stops the live `up` of the cluster in dir
// if there is one (it tears its cluster down itself), then removes what is
// left under the cluster's lock, so that no `up` starts in the middle.
func DownLive(dir, name string, keepLogs bool, out io.Writer) error {
	// Down clears the directory: never one that is not a state directory
	// (a mistyped --dir $HOME with --name).
	chk := Config{Dir: dir}
	if err := chk.checkDir(); err != nil {
		return err
	}
	dir = chk.Dir
	// The name comes from the state before the owner is stopped: its
	// teardown removes cluster.json.
	if name == "" {
		st, err := ReadState(dir)
		if errors.Is(err, os.ErrNotExist) {
			return nil // nothing recorded, nothing to remove
		}
		if err != nil {
			return fmt.Errorf("read cluster state: %w", err)
		}
		name = st.Name
	}
	pid, err := Stop(dir, stopTimeout)
	if err != nil {
		return err
	}
	if pid != 0 {
		fmt.Fprintf(out, "stopped nodenet up pid %d\n", pid)
	}
	cl, err := claimCluster(name, dir)
	if err != nil {
		return err
	}
	defer cl.release()
	return Down(dir, name, keepLogs)
}
