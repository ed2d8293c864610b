package nftables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Runner talks to nftables. Apply is one atomic transaction (`nft -f -`):
// all of it takes effect or none of it.
type Runner interface {
	// Apply runs script (nft commands, one per line) as one transaction.
	Apply(ctx context.Context, script []byte) error
	// List runs a read-only nft command ("list", "table", "ip", "t") and
	// returns its output.
	List(ctx context.Context, args ...string) ([]byte, error)
}

// ExecRunner runs the nft binary, optionally behind a command prefix (tests
// use "ip netns exec NAME" to program a throwaway namespace).
type ExecRunner struct {
	Prefix []string
}

// ErrNotFound is returned when the nft binary is missing.
var ErrNotFound = errors.New("nft binary not found")

func (r ExecRunner) cmd(ctx context.Context, args ...string) (*exec.Cmd, error) {
	if len(r.Prefix) == 0 {
		if _, err := exec.LookPath("nft"); err != nil {
			return nil, fmt.Errorf("run nft: %w", ErrNotFound)
		}
	}
	argv := append(append(append([]string{}, r.Prefix...), "nft"), args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...), nil
}

// Apply implements Runner.
func (r ExecRunner) Apply(ctx context.Context, script []byte) error {
	c, err := r.cmd(ctx, "-f", "-")
	if err != nil {
		return err
	}
	c.Stdin = bytes.NewReader(script)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		return &Error{Stderr: strings.TrimSpace(stderr.String()), Err: err}
	}
	return nil
}

// List implements Runner.
func (r ExecRunner) List(ctx context.Context, args ...string) ([]byte, error) {
	c, err := r.cmd(ctx, args...)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return nil, &Error{Stderr: strings.TrimSpace(stderr.String()), Err: err}
	}
	return stdout.Bytes(), nil
}

// Error is a failed nft command (real or Fake); Stderr holds nft's message,
// which names the errno ("Could not process rule: No such file or
// directory") and quotes the offending input line.
type Error struct {
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	s := "nft: " + e.Err.Error()
	if e.Stderr != "" {
		s += ": " + e.Stderr
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Kernel error messages as nft prints them.
const (
	msgNoEnt    = "No such file or directory"
	msgExist    = "File exists"
	msgBusy     = "Device or resource busy"
	msgNotSupp  = "Operation not supported"
	msgTooMany  = "Too many links"
	msgInvalArg = "Invalid argument"
)

func hasMsg(err error, msg string) bool {
	var e *Error
	return errors.As(err, &e) && strings.Contains(e.Stderr, msg)
}

// IsNotFound reports whether nft failed because an object did not exist
// (ENOENT).
func IsNotFound(err error) bool { return hasMsg(err, msgNoEnt) }

// IsExist reports an EEXIST failure (e.g. an element already mapped to
// another verdict).
func IsExist(err error) bool { return hasMsg(err, msgExist) }

// IsBusy reports an EBUSY failure (deleting a chain or set still in use).
func IsBusy(err error) bool { return hasMsg(err, msgBusy) }
