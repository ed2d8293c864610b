package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/nodenet/nodenet/proxy"
)

// Runner runs iptables-restore / iptables-save for one IP family.
type Runner interface {
	// Restore applies data with iptables-restore --noflush --wait.
	Restore(ctx context.Context, data []byte) error
	// Save returns iptables-save output for one table.
	Save(ctx context.Context, table string) ([]byte, error)
	// ListChain returns one chain's rules (iptables -S, without the
	// "-A CHAIN " prefix); exists is false when the chain is missing.
	ListChain(ctx context.Context, table, chain string) (rules []string, exists bool, err error)
}

// Variant is the iptables backend.
type Variant string

const (
	NFT    Variant = "nft"
	Legacy Variant = "legacy"
)

// ExecRunner runs the real binaries, optionally behind a command prefix
// (tests use "ip netns exec NAME").
type ExecRunner struct {
	Prefix  []string
	Family  proxy.Family
	Variant Variant
}

func (r ExecRunner) bin(tool string) string {
	b := "iptables"
	if r.Family == proxy.IPv6 {
		b = "ip6tables"
	}
	b += "-" + string(r.Variant)
	if tool != "" {
		b += "-" + tool
	}
	return b
}

func (r ExecRunner) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, r.Prefix...), name), args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// ErrNotFound is returned when the iptables binaries are missing.
var ErrNotFound = errors.New("iptables binary not found")

// Restore implements Runner.
func (r ExecRunner) Restore(ctx context.Context, data []byte) error {
	name := r.bin("restore")
	if len(r.Prefix) == 0 {
		if _, err := exec.LookPath(name); err != nil {
			return fmt.Errorf("run %s: %w", name, ErrNotFound)
		}
	}
	c := r.cmd(ctx, name, "--noflush", "--wait")
	c.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		return &RestoreError{Stderr: strings.TrimSpace(stderr.String()), Err: err, Line: errorLine(stderr.String(), data)}
	}
	return nil
}

// Save implements Runner.
func (r ExecRunner) Save(ctx context.Context, table string) ([]byte, error) {
	name := r.bin("save")
	if len(r.Prefix) == 0 {
		if _, err := exec.LookPath(name); err != nil {
			return nil, fmt.Errorf("run %s: %w", name, ErrNotFound)
		}
	}
	c := r.cmd(ctx, name, "-t", table)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("run %s -t %s: %w: %s", name, table, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// ListChain implements Runner with `iptables -S CHAIN`: it reads one chain,
// not the whole table as iptables-save does.
func (r ExecRunner) ListChain(ctx context.Context, table, chain string) ([]string, bool, error) {
	name := r.bin("")
	c := r.cmd(ctx, name, "-w", "-t", table, "-S", chain)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		if strings.Contains(stderr.String(), "No chain/target/match by that name") {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("run %s -t %s -S %s: %w: %s", name, table, chain, err, strings.TrimSpace(stderr.String()))
	}
	var rules []string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if rule, ok := strings.CutPrefix(l, "-A "+chain+" "); ok {
			rules = append(rules, rule)
		}
	}
	return rules, true, nil
}

// RestoreError is a failed iptables-restore; Line is the offending input line
// when iptables said which.
type RestoreError struct {
	Stderr string
	Line   string
	Err    error
}

func (e *RestoreError) Error() string {
	s := "iptables-restore: " + e.Err.Error()
	if e.Stderr != "" {
		s += ": " + e.Stderr
	}
	if e.Line != "" {
		s += " (input: " + e.Line + ")"
	}
	return s
}

func (e *RestoreError) Unwrap() error { return e.Err }

func errorLine(stderr string, data []byte) string {
	var n int
	for _, l := range strings.Split(stderr, "\n") {
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "Error occurred at line: %d", &n); err == nil {
			break
		}
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "line %d:", &n); err == nil {
			break
		}
	}
	if n <= 0 {
		return ""
	}
	lines := strings.Split(string(data), "\n")
	if n > len(lines) {
		return ""
	}
	return lines[n-1]
}

// Detect chooses the backend the host uses, like kube-proxy's
// iptables-wrapper: the variant that already holds kubelet/kube-proxy hint
// chains or (failing that) more rules wins; with neither, the host's
// `iptables` alternative decides.
func Detect(ctx context.Context, prefix []string, family proxy.Family) (Variant, error) {
	score := map[Variant]int{}
	hint := map[Variant]bool{}
	found := false
	for _, v := range []Variant{NFT, Legacy} {
		r := ExecRunner{Prefix: prefix, Family: family, Variant: v}
		for _, table := range []string{"mangle", "nat", "filter"} {
			out, err := r.Save(ctx, table)
			if err != nil {
				continue
			}
			found = true
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, ":KUBE-IPTABLES-HINT") || strings.HasPrefix(l, ":KUBE-KUBELET-CANARY") || strings.HasPrefix(l, ":NODENET-") {
					hint[v] = true
				}
				if strings.HasPrefix(l, "-A ") {
					score[v]++
				}
			}
		}
	}
	if !found {
		return "", fmt.Errorf("detect iptables variant: %w", ErrNotFound)
	}
	switch {
	case hint[NFT] && !hint[Legacy]:
		return NFT, nil
	case hint[Legacy] && !hint[NFT]:
		return Legacy, nil
	case score[Legacy] > score[NFT]:
		return Legacy, nil
	case score[NFT] > score[Legacy]:
		return NFT, nil
	}
	argv := append(append([]string{}, prefix...), "iptables", "--version")
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	if err == nil && strings.Contains(string(out), "legacy") {
		return Legacy, nil
	}
	return NFT, nil
}
