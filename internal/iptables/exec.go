package iptables

import (
	"bytes"
	"context"
	"os/exec"
)

// Exec runs one command (argv[0] is the program) with stdin (nil for none)
// and returns what it wrote to stdout and stderr. A non-zero exit is an
// error; Exec adds no context of its own, the runner does.
//
// Exec is where a command is placed in a network namespace: Direct runs it
// where the calling thread is, Prefixed behind e.g. "ip netns exec NAME",
// and a daemon can wrap Direct in its own namespace switch.
type Exec func(ctx context.Context, stdin []byte, argv ...string) (stdout, stderr []byte, err error)

// Direct runs argv as a child of this process. The child starts in the
// network namespace of the OS thread that calls Direct, so a caller locked
// to a thread inside another namespace programs that namespace.
func Direct(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.Bytes(), stderr.Bytes(), err
}

// Prefixed runs every command behind prefix, e.g. "ip netns exec NAME",
// which is how tests and benchmarks reach a namespace without switching
// threads.
func Prefixed(prefix ...string) Exec {
	return func(ctx context.Context, stdin []byte, argv ...string) ([]byte, []byte, error) {
		return Direct(ctx, stdin, append(append([]string{}, prefix...), argv...)...)
	}
}
