package iptables

import (
	"errors"
	"os/exec"
	"strings"
)

// What a failure means, for errors.Is. The tools say it only in their
// message text; classify is the one place that reads it.
var (
	// ErrNotInstalled: the binary is not there (or not in the namespace's
	// mount view).
	ErrNotInstalled = errors.New("iptables binary not installed")
	// ErrNotExist: a chain, a jump target or (for -D/-C) a rule does not
	// exist.
	ErrNotExist = errors.New("chain or rule does not exist")
	// ErrLocked: another program held the xtables lock longer than we
	// wait for it; trying again later is the remedy.
	ErrLocked = errors.New("xtables lock held by another program")
)

// Error is a failed iptables command.
type Error struct {
	Binary string // the program, e.g. "iptables-nft-restore"
	Table  string // the table it worked on, "" when not known
	Line   string // iptables-restore: the input line the tool blamed
	Stderr string // what the tool said, trimmed
	Err    error  // the underlying failure (exit status, exec error)
	kind   error  // ErrNotExist etc., nil when the message is not classified
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Binary)
	if e.Table != "" {
		b.WriteString(" (table " + e.Table + ")")
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	if e.Stderr != "" {
		b.WriteString(": " + e.Stderr)
	}
	if e.Line != "" {
		b.WriteString(" (input: " + e.Line + ")")
	}
	return b.String()
}

// Unwrap exposes both the classification and the underlying error.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.kind != nil {
		errs = append(errs, e.kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// messages maps what iptables prints to what it means. The texts are those
// of iptables 1.8 (legacy and nft); iptables-legacy-restore names only the
// failing line, so its errors stay unclassified.
var messages = []struct {
	text string
	kind error
}{
	{"holding the xtables lock", ErrLocked},                        // "Another app is currently holding the xtables lock. Stopped waiting after 5s."
	{"No chain/target/match by that name", ErrNotExist},            // legacy -S/-D, nft-restore
	{"does not exist", ErrNotExist},                                // nft: "Chain 'X' does not exist"
	{"does a matching rule exist in that chain", ErrNotExist},      // -D/-C of a rule that is not there
	{"failed: No such file or directory", ErrNotInstalled},         // `ip netns exec NS tool`: exec of "tool" failed
	{"Table does not exist (do you need to insmod?)", ErrNotExist}, // legacy without the table's module
}

// classify returns the sentinel for a failure, or nil.
func classify(err error, stderr string) error {
	if errors.Is(err, exec.ErrNotFound) {
		return ErrNotInstalled
	}
	for _, m := range messages {
		if strings.Contains(stderr, m.text) {
			return m.kind
		}
	}
	return nil
}

// newError builds the Error for a failed run of binary.
func newError(binary, table string, err error, stderr []byte) *Error {
	msg := strings.TrimSpace(string(stderr))
	return &Error{Binary: binary, Table: table, Stderr: msg, Err: err, kind: classify(err, msg)}
}
