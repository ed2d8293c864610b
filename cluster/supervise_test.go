package cluster

import (
	"os/exec"
	"slices"
	"testing"
)

// TestComponentCommand: a component with a priority runs its binary
// through nice(1), which execs it (same pid, the component's cmdline); one
// without runs the binary itself. The control plane has a priority.
func TestComponentCommand(t *testing.T) {
	plain := (&component{args: []string{"agent", "--x"}}).command("/opt/nodenet")
	if !slices.Equal(plain.Args, []string{"/opt/nodenet", "agent", "--x"}) {
		t.Errorf("without a priority: %q", plain.Args)
	}
	nice, err := exec.LookPath("nice")
	if err != nil {
		t.Skip("no nice(1) on PATH: the component would run at the default priority")
	}
	cmd := (&component{args: []string{"apiserver"}, nice: controlPlaneNice}).command("/opt/nodenet")
	if want := []string{nice, "-n", "-10", "/opt/nodenet", "apiserver"}; !slices.Equal(cmd.Args, want) {
		t.Errorf("with nice -10: %q, want %q", cmd.Args, want)
	}
}
