package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/containernetworking/cni/pkg/invoke"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nodenet/nodenet/node/shim"
)

// shimCommand is the command line of the shim (package shim) for an agent
// whose binary is self: the lean nodenet-shim next to it, which starts in
// a fraction of nodenet's time and runs several times per pod, or
// `nodenet logshim` (the same code) when only nodenet was built. Nil
// without a binary (an agent embedded in another program).
func shimCommand(self string) []string { return siblingCommand(self, "nodenet-shim", "logshim") }

// siblingCommand is the command line of a single-purpose binary name
// built beside the multi-call binary self (nodenet-shim, nodenet-proxy),
// or, when it was not built, self's subcommand sub running the same code.
// Nil without a binary.
func siblingCommand(self, name, sub string) []string {
	if self == "" {
		return nil
	}
	if p := filepath.Join(filepath.Dir(self), name); fileExists(p) {
		return []string{p}
	}
	return []string{self, sub}
}

// The CNI plugins of a node run in the agent's mount namespace, like the
// kubelet's runtime runs them on the host. On a real host that is the
// node's filesystem. The local cluster's nodes share one filesystem and
// each has a root directory of its own (Options.HostRoot), where the
// DaemonSet's flanneld writes /run/flannel/subnet.env and the conflist
// names that path: the plugins must see the node's files there, not the
// machine's. So with a host root, each plugin runs through the shim's
// second stage (package shim) in a private mount namespace with the node's own copies
// of the paths CNI plugins use bound on the real ones.

// cniNodePaths are the paths the node's CNI plugins read or write: the
// subnet file flanneld writes, the IPAM and plugin state, and the
// iptables lock (portmap must serialise with the node's proxy, which
// sees the node's lock through its hostPath volume).
var cniNodePaths = []string{"/run/flannel", "/var/lib/cni", "/run/xtables.lock"}

// nodeViewExec is a libcni invoke.Exec that runs plugins in the node's
// view of the filesystem.
type nodeViewExec struct {
	shim   []string // the shim's command line (shimCommand): its --exec stage binds
	mounts []Mount
}

// newNodeViewExec returns nil (libcni's default exec) when the host root
// is the real root (or there is no shim to run the binds with); otherwise an Exec binding every cniNodePaths entry
// that exists under root. The entries are created by whoever owns them
// (the cluster, flanneld's hostPath volume); one that does not exist yet
// is left to the machine's path.
func newNodeViewExec(shimCmd []string, root string) invoke.Exec {
	if len(shimCmd) == 0 || root == "" || filepath.Clean(root) == "/" {
		return nil
	}
	e := &nodeViewExec{shim: shimCmd}
	for _, p := range cniNodePaths {
		e.mounts = append(e.mounts, Mount{Source: filepath.Join(root, p), Target: p})
	}
	return e
}

// present is the binds whose node-side source exists now.
func (e *nodeViewExec) present() []Mount {
	var out []Mount
	for _, m := range e.mounts {
		if _, err := os.Stat(m.Source); err == nil {
			out = append(out, m)
		}
	}
	return out
}

func (e *nodeViewExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	argv, err := shim.ExecStage(e.shim, e.present(), []string{pluginPath})
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", pluginPath, err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdinData)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Private mounts (Go also makes / MS_PRIVATE|MS_REC in the child), so
	// nothing bound here reaches the agent or the machine.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if err := cmd.Run(); err != nil {
		return nil, pluginError(err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// pluginError is what a failed plugin said: its CNI error object on
// stdout when it wrote one (libcni callers match on its code), else its
// stderr.
func pluginError(err error, stdout, stderr []byte) error {
	var ce cnitypes.Error
	if len(stdout) > 0 && json.Unmarshal(stdout, &ce) == nil && (ce.Code != 0 || ce.Msg != "") {
		return &ce
	}
	if len(stderr) == 0 {
		return &cnitypes.Error{Code: cnitypes.ErrInternal, Msg: fmt.Sprintf("plugin failed with no message: %v", err)}
	}
	return &cnitypes.Error{Code: cnitypes.ErrInternal, Msg: fmt.Sprintf("plugin failed: %v: %s", err, bytes.TrimSpace(stderr))}
}

func (e *nodeViewExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (e *nodeViewExec) Decode(jsonBytes []byte) (version.PluginInfo, error) {
	var d version.PluginDecoder
	return d.Decode(jsonBytes)
}
