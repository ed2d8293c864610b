package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// pods), the namespaces with their mounts and veths, and the state under
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
	if err := removeNetns(listNetns(Prefix(name))); err != nil {
		return err
	}
	ents, _ := os.ReadDir(dir)
	var errs []error
	for _, e := range ents {
		if keepLogs && e.Name() == "logs" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if !keepLogs {
		_ = os.Remove(dir)
	}
	return errors.Join(errs...)
}
