package nftables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/nlmsg"
)

// Runner talks to nftables. Apply and Elements are each one atomic
// transaction: all of it takes effect or none of it.
type Runner interface {
	// Apply runs script (nft commands, one per line) as one transaction.
	Apply(ctx context.Context, script []byte) error
	// Batch runs ops on table (family "ip"/"ip6") as one transaction, in
	// the order given. It is the fast path for endpoint changes (see
	// netlink.go).
	Batch(ctx context.Context, family, table string, ops []Op) error
	// RuleCount counts the rules of a chain; 0 when the table or chain
	// does not exist.
	RuleCount(ctx context.Context, family, table, chain string) (int, error)
	// List runs a read-only nft command ("list", "table", "ip", "t") and
	// returns its output.
	List(ctx context.Context, args ...string) ([]byte, error)
}

// ExecRunner runs the nft binary for rules and sends element changes over
// netlink. Netns, when set, is the network namespace to program: a name
// `ip netns` knows or a path (tests program throwaway namespaces so).
//
// The runner owns one nfnetlink socket, opened at its first netlink
// transaction and kept open between transactions: closing a netlink socket
// that has committed to nf_tables takes 10-15 ms, and the next commit in
// that namespace waits for it. Close releases it. A zero ExecRunner (with
// Netns set as wanted) is ready; use it through a pointer, and do not copy
// it.
type ExecRunner struct {
	Netns string

	mu   sync.Mutex
	conn *nlmsg.Conn // nil until needed, and after the socket failed
	nsID uint64      // inode of the namespace conn lives in (0: our own)
}

// Close releases the runner's netlink socket, if it has one. The runner
// stays usable: its next netlink transaction opens a new socket.
func (r *ExecRunner) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return nil
	}
	err := r.conn.Close()
	r.conn = nil
	return err
}

func (r *ExecRunner) netnsPath() string { return netnsutil.Path(r.Netns) }

// ErrNotFound is returned when the nft binary is missing.
var ErrNotFound = errors.New("nft binary not found")

// nft runs the nft binary with args (and stdin, if not nil) in r's
// namespace and returns its output. It starts nft from a thread switched
// into the namespace: nft inherits it without an `ip netns exec` between.
func (r *ExecRunner) nft(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	bin, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("run nft: %w", ErrNotFound)
	}
	c := exec.CommandContext(ctx, bin, args...)
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if r.Netns == "" {
		err = c.Run()
	} else {
		err = netnsutil.Do(r.netnsPath(), c.Run)
	}
	if err != nil {
		return nil, &Error{Stderr: strings.TrimSpace(stderr.String()), Err: err}
	}
	return stdout.Bytes(), nil
}

// Apply implements Runner.
func (r *ExecRunner) Apply(ctx context.Context, script []byte) error {
	_, err := r.nft(ctx, script, "-f", "-")
	return err
}

// Batch implements Runner over netlink; a batch too big for one netlink
// send, or with a rule the encoder does not know, goes through nft instead.
func (r *ExecRunner) Batch(ctx context.Context, family, table string, ops []Op) error {
	if len(ops) == 0 {
		return nil
	}
	err := r.sendBatch(family, table, ops)
	if !errors.Is(err, errBatchTooBig) && !errors.Is(err, errNotEncodable) {
		return err
	}
	return r.Apply(ctx, opsScript(family, table, ops))
}

// RuleCount implements Runner with a netlink dump: cheap whatever the size
// of the table, unlike any nft listing.
func (r *ExecRunner) RuleCount(_ context.Context, family, table, chain string) (int, error) {
	return r.countRules(family, table, chain)
}

// opsScript renders ops as nft commands.
func opsScript(family, table string, ops []Op) []byte {
	var b bytes.Buffer
	for _, op := range ops {
		b.WriteString(op.script(family + " " + table))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// List implements Runner.
func (r *ExecRunner) List(ctx context.Context, args ...string) ([]byte, error) {
	return r.nft(ctx, nil, args...)
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
