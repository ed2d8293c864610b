package iptables

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// script is an Exec that records every command and answers from a table
// keyed by the program name.
type script struct {
	calls   [][]string
	answers map[string]answer
}

type answer struct {
	stdout, stderr string
	err            error
}

func (s *script) exec(_ context.Context, _ []byte, argv ...string) ([]byte, []byte, error) {
	s.calls = append(s.calls, argv)
	a, ok := s.answers[argv[0]]
	if !ok {
		return nil, nil, fmt.Errorf("exec: %q: %w", argv[0], exec.ErrNotFound)
	}
	return []byte(a.stdout), []byte(a.stderr), a.err
}

var exit1 = errors.New("exit status 1")

// TestCommandLines: every command that takes the xtables lock waits for
// it, restores never flush what they do not declare, and the binary is the
// family's and backend's.
func TestCommandLines(t *testing.T) {
	s := &script{answers: map[string]answer{
		"ip6tables-legacy-restore": {}, "ip6tables-legacy-save": {}, "ip6tables-legacy": {},
	}}
	r := New(s.exec, IPv6, Legacy)
	ctx := context.Background()
	if err := r.Restore(ctx, []byte("*nat\nCOMMIT\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Save(ctx, "nat"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.ListChain(ctx, "nat", "POSTROUTING"); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"ip6tables-legacy-restore", "--noflush", "--wait=5"},
		{"ip6tables-legacy-save", "-t", "nat"},
		{"ip6tables-legacy", "--wait", "5", "-t", "nat", "-S", "POSTROUTING"},
	}
	if !slices.EqualFunc(s.calls, want, slices.Equal) {
		t.Fatalf("commands %q, want %q", s.calls, want)
	}
	if got := r.String(); got != "ip6tables-legacy (IPv6)" {
		t.Errorf("String() = %q", got)
	}
}

// TestErrors: a failure names the binary, the table and the line the tool
// blamed, carries its stderr, and is classified from the message text.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	input := "*nat\n:NODENET-A - [0:0]\nCOMMIT\n*filter\n-A NODENET-NOPE -j ACCEPT\nCOMMIT\n"
	for _, tc := range []struct {
		name      string
		ans       answer
		kind      error
		table     string
		line      string
		inMessage []string
	}{
		{"nft names the line", answer{stderr: "iptables-nft-restore: line 5 failed: No chain/target/match by that name.\n", err: exit1},
			ErrNotExist, "filter", "-A NODENET-NOPE -j ACCEPT",
			[]string{"iptables-nft-restore (table filter): exit status 1: ", "No chain/target/match", "(input: -A NODENET-NOPE -j ACCEPT)"}},
		{"CHAIN_DEL", answer{stderr: "iptables-nft-restore v1.8.9 (nf_tables): \nline 2: CHAIN_DEL failed (Device or resource busy): chain NODENET-A\n", err: exit1},
			nil, "nat", ":NODENET-A - [0:0]", []string{"CHAIN_DEL failed"}},
		{"old restore", answer{stderr: "iptables-restore: line 5 failed\nError occurred at line: 5\n", err: exit1},
			nil, "filter", "-A NODENET-NOPE -j ACCEPT", nil},
		{"no line", answer{stderr: "iptables-nft-restore: unable to initialize table 'nat'\n", err: exit1},
			nil, "nat,filter", "", []string{"(table nat,filter)"}},
		{"lock", answer{stderr: "Another app is currently holding the xtables lock. Stopped waiting after 5s.\n", err: exit1},
			ErrLocked, "nat,filter", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{answers: map[string]answer{"iptables-nft-restore": tc.ans}}
			err := New(s.exec, IPv4, NFT).Restore(ctx, []byte(input))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if e.Binary != "iptables-nft-restore" || e.Table != tc.table || e.Line != tc.line || e.Stderr != strings.TrimSpace(tc.ans.stderr) {
				t.Errorf("got %+v, want table %q line %q", e, tc.table, tc.line)
			}
			for _, kind := range []error{ErrNotExist, ErrLocked, ErrNotInstalled} {
				if errors.Is(err, kind) != (kind == tc.kind) {
					t.Errorf("errors.Is(%v, %v) = %v", err, kind, !(kind == tc.kind))
				}
			}
			if !errors.Is(err, exit1) {
				t.Error("the exec error is not wrapped")
			}
			for _, want := range tc.inMessage {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q lacks %q", err, want)
				}
			}
		})
	}
}

// TestClassify: the messages of iptables 1.8 (nft and legacy, as captured
// from the tools) map to the sentinels.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err    error
		stderr string
		want   error
	}{
		{exit1, "iptables: No chain/target/match by that name.", ErrNotExist},
		{exit1, "iptables v1.8.9 (nf_tables): Chain 'NOPE' does not exist", ErrNotExist},
		{exit1, "iptables: Bad rule (does a matching rule exist in that chain?).", ErrNotExist},
		{exit1, "iptables-nft-restore: line 2 failed: Bad rule (does a matching rule exist in that chain?).", ErrNotExist},
		{exit1, "iptables v1.8.9 (legacy): can't initialize iptables table `nat': Table does not exist (do you need to insmod?)", ErrNotExist},
		{exit1, "Another app is currently holding the xtables lock. Stopped waiting after 5s.", ErrLocked},
		{exit1, `exec of "iptables-legacy-save" failed: No such file or directory`, ErrNotInstalled},
		{fmt.Errorf("exec: %w", exec.ErrNotFound), "", ErrNotInstalled},
		{exit1, "iptables: Chain already exists.", nil},
		{exit1, "iptables-restore: line 2 failed", nil},
	} {
		if got := classify(tc.err, tc.stderr); got != tc.want {
			t.Errorf("classify(%v, %q) = %v, want %v", tc.err, tc.stderr, got, tc.want)
		}
	}
}

// TestListChainMissing: a missing chain is "exists == false", not an
// error, with either backend's wording; other failures are errors.
func TestListChainMissing(t *testing.T) {
	ctx := context.Background()
	for _, stderr := range []string{
		"iptables: No chain/target/match by that name.",
		"iptables v1.8.9 (nf_tables): chain `NOPE' in table `nat' is incompatible, use 'nft' tool.",
	} {
		s := &script{answers: map[string]answer{"iptables-nft": {stderr: stderr, err: exit1}}}
		rules, ok, err := New(s.exec, IPv4, NFT).ListChain(ctx, "nat", "NOPE")
		if rules != nil || ok || err != nil {
			t.Errorf("%q: got %q, %v, %v; want missing", stderr, rules, ok, err)
		}
	}
	s := &script{answers: map[string]answer{"iptables-nft": {stdout: "-N X\n-A X -j RETURN\n-A X -s 10.0.0.0/8 -j ACCEPT\n"}}}
	rules, ok, err := New(s.exec, IPv4, NFT).ListChain(ctx, "nat", "X")
	if !ok || err != nil || !slices.Equal(rules, []string{"-j RETURN", "-s 10.0.0.0/8 -j ACCEPT"}) {
		t.Errorf("got %q, %v, %v", rules, ok, err)
	}
	_, _, err = New((&script{}).exec, IPv4, NFT).ListChain(ctx, "nat", "X")
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "iptables-nft (table nat)") {
		t.Errorf("without the binary: %v", err)
	}
}
