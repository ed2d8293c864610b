package iptables

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Runner is what the firewall programmers need from iptables, for one IP
// family and backend. ExecRunner runs the real tools, Fake is the
// in-memory double.
type Runner interface {
	// Restore applies data (iptables-restore syntax; Batch builds it) in
	// one iptables-restore --noflush run: chains declared in it are
	// flushed, everything else is kept.
	Restore(ctx context.Context, data []byte) error
	// Save returns iptables-save output for one table.
	Save(ctx context.Context, table string) ([]byte, error)
	// ListChain returns one chain's rules as iptables-save writes them
	// without the "-A CHAIN " prefix; exists is false when the chain is
	// missing. It reads one chain, where Save dumps the whole table.
	ListChain(ctx context.Context, table, chain string) (rules []string, exists bool, err error)
}

var (
	_ Runner = (*ExecRunner)(nil)
	_ Runner = (*Fake)(nil)
)

// Family is the IP family a runner programs (iptables or ip6tables); the
// values are the proxy's, 4 and 6.
type Family int

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// Backend is the iptables implementation behind the command line.
type Backend string

const (
	NFT    Backend = "nft"
	Legacy Backend = "legacy"
)

// Backends are both implementations. A cleanup visits each: rules written
// through one are invisible to the other.
var Backends = []Backend{NFT, Legacy}

// lockWait is how long a command waits for the xtables lock (only the
// legacy backend takes it), kube-proxy's value: long enough for another
// program's restore, short enough that a stuck holder is reported as
// ErrLocked and retried instead of hanging a sync.
const lockWait = 5

// ExecRunner runs the real binaries of one family and backend.
type ExecRunner struct {
	exec    Exec
	family  Family
	backend Backend
}

// New returns a runner for family and backend whose commands run through
// exec (Direct when nil).
func New(exec Exec, family Family, backend Backend) *ExecRunner {
	if exec == nil {
		exec = Direct
	}
	return &ExecRunner{exec: exec, family: family, backend: backend}
}

// Open detects the backend for family (see Detect) and returns its runner.
func Open(ctx context.Context, exec Exec, family Family) (*ExecRunner, error) {
	if exec == nil {
		exec = Direct
	}
	b, err := Detect(ctx, exec, family)
	if err != nil {
		return nil, err
	}
	return New(exec, family, b), nil
}

// Backend is the backend this runner programs.
func (r *ExecRunner) Backend() Backend { return r.backend }

// Family is the family this runner programs.
func (r *ExecRunner) Family() Family { return r.family }

// binary names a tool of this family and backend: tool is "" (iptables
// itself), "save" or "restore".
func binary(family Family, backend Backend, tool string) string {
	b := "iptables"
	if family == IPv6 {
		b = "ip6tables"
	}
	b += "-" + string(backend)
	if tool != "" {
		b += "-" + tool
	}
	return b
}

// Restore implements Runner.
func (r *ExecRunner) Restore(ctx context.Context, data []byte) error {
	bin := binary(r.family, r.backend, "restore")
	_, stderr, err := r.exec(ctx, data, bin, "--noflush", "--wait="+strconv.Itoa(lockWait))
	if err != nil {
		e := newError(bin, "", err, stderr)
		if n := blamedLine(e.Stderr); n > 0 {
			e.Table, e.Line = lineAt(data, n)
		}
		if e.Table == "" {
			e.Table = strings.Join(tablesIn(data), ",")
		}
		return e
	}
	return nil
}

// Save implements Runner.
func (r *ExecRunner) Save(ctx context.Context, table string) ([]byte, error) {
	bin := binary(r.family, r.backend, "save")
	out, stderr, err := r.exec(ctx, nil, bin, "-t", table)
	if err != nil {
		return nil, newError(bin, table, err, stderr)
	}
	return out, nil
}

// ListChain implements Runner with `iptables -S CHAIN`.
func (r *ExecRunner) ListChain(ctx context.Context, table, chain string) ([]string, bool, error) {
	bin := binary(r.family, r.backend, "")
	out, stderr, err := r.exec(ctx, nil, bin, "--wait", strconv.Itoa(lockWait), "-t", table, "-S", chain)
	if err != nil {
		e := newError(bin, table, err, stderr)
		// iptables-nft 1.8.9 reports a chain that is not there as
		// "chain `X' in table `T' is incompatible, use 'nft' tool".
		if errors.Is(e, ErrNotExist) || strings.Contains(e.Stderr, "is incompatible, use 'nft' tool") {
			return nil, false, nil
		}
		return nil, false, e
	}
	prefix := "-A " + chain + " "
	var rules []string
	for line := range strings.Lines(string(out)) {
		if rule, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), prefix); ok {
			rules = append(rules, rule)
		}
	}
	return rules, true, nil
}

// blamedLine finds the input line number in iptables-restore's complaint:
// "line 2 failed", "line 6: CHAIN_DEL failed" or "Error occurred at line: 3".
func blamedLine(stderr string) int {
	for _, marker := range []string{"line: ", "line "} {
		for s := stderr; ; {
			i := strings.Index(s, marker)
			if i < 0 {
				break
			}
			s = s[i+len(marker):]
			end := 0
			for end < len(s) && s[end] >= '0' && s[end] <= '9' {
				end++
			}
			if n, err := strconv.Atoi(s[:end]); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// lineAt returns input line n (1-based) and the table it belongs to.
func lineAt(data []byte, n int) (table, line string) {
	i := 0
	for l := range strings.Lines(string(data)) {
		i++
		l = strings.TrimRight(l, "\n")
		if t, ok := strings.CutPrefix(l, "*"); ok {
			table = t
		}
		if i == n {
			return table, l
		}
	}
	return "", ""
}

// tablesIn lists the tables restore input touches.
func tablesIn(data []byte) []string {
	var out []string
	for l := range strings.Lines(string(data)) {
		if t, ok := strings.CutPrefix(strings.TrimRight(l, "\n"), "*"); ok {
			out = append(out, t)
		}
	}
	return out
}

// String is for logs: "iptables-nft (IPv4)".
func (r *ExecRunner) String() string {
	return fmt.Sprintf("%s (%s)", binary(r.family, r.backend, ""), r.family)
}
