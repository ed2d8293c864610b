package ebpf

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPreflightNamesWhatIsMissing: a pin root off bpffs (existing or not)
// and a directory that is no cgroup are one error naming both.
func TestPreflightNamesWhatIsMissing(t *testing.T) {
	dir := t.TempDir()
	for _, pins := range []string{dir, filepath.Join(dir, "missing", "nodenet")} {
		err := Preflight(pins, dir, true)
		if err == nil || !strings.Contains(err.Error(), "not on a bpf filesystem") || !strings.Contains(err.Error(), "not a cgroup v2 directory") {
			t.Errorf("Preflight(%s, %s) = %v", pins, dir, err)
		}
	}
}
