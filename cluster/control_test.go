package cluster

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestControlSocketRootOnly: the control socket appears at its path
// already with mode 0600 (bound under a temporary name, chmod, renamed),
// answers a request (an unknown node: refused by name), and is gone once
// the cluster stops.
func TestControlSocketRootOnly(t *testing.T) {
	dir := t.TempDir()
	c := &Cluster{cfg: Config{Name: "ctl", Dir: dir, Nodes: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.serveControl(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(ControlSocket(dir))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("control socket mode %v, want a socket with 0600", st.Mode())
	}
	if _, err := os.Stat(ControlSocket(dir) + ".new"); !os.IsNotExist(err) {
		t.Errorf("temporary socket name left behind: %v", err)
	}
	if _, err := RestartNodeVia(ctx, dir, "node-9"); err == nil || !strings.Contains(err.Error(), "node-9") {
		t.Errorf("restart of an unknown node: %v, want a refusal naming it", err)
	}
	cancel()
	c.wg.Wait()
	if _, err := os.Stat(ControlSocket(dir)); !os.IsNotExist(err) {
		t.Errorf("control socket left after stop: %v", err)
	}
}
