package netnsutil

import "os/exec"

// Start starts cmd inside the namespace at path; Wait it from anywhere.
//
// Go's fork happens on the thread that calls cmd.Start, and the child
// inherits that thread's namespace, so starting from a switched thread
// puts the child in the namespace from its first instruction. The
// alternative, setns in the child, is not something os/exec can do (its
// SysProcAttr can create namespaces but not join one), so it would take a
// helper process (`ip netns exec`, nsenter, a re-exec of ourselves)
// between us and the command: another binary that must exist, another
// exit status to interpret, and with `ip netns exec` a private mount
// namespace and /sys the child would not otherwise have.
func Start(path string, cmd *exec.Cmd) error { return Do(path, cmd.Start) }
