package iptables

import (
	"bytes"
	"context"
	"fmt"
)

// Table is one table as iptables-save prints it: every declared chain
// with its rules, each rule as iptables-save writes it without the leading
// "-A CHAIN ". A declared chain without rules has a nil slice.
type Table map[string][]string

// ParseTable reads the iptables-save output of one table. Comments,
// policies and counters are dropped.
func ParseTable(save []byte) Table {
	t := Table{}
	last := "" // iptables-save groups a chain's rules: one key string per chain
	for len(save) > 0 {
		var line []byte
		line, save, _ = bytes.Cut(save, []byte{'\n'})
		switch {
		case len(line) > 1 && line[0] == ':':
			name, _, _ := bytes.Cut(line[1:], []byte{' '})
			if _, ok := t[string(name)]; !ok {
				t[string(name)] = nil
			}
		case bytes.HasPrefix(line, []byte("-A ")):
			chain, rule, _ := bytes.Cut(line[3:], []byte{' '})
			if string(chain) != last {
				last = string(chain)
			}
			t[last] = append(t[last], string(rule))
		}
	}
	return t
}

// ReadTable saves one table through r and parses it.
func ReadTable(ctx context.Context, r Runner, table string) (Table, error) {
	out, err := r.Save(ctx, table)
	if err != nil {
		return nil, fmt.Errorf("read %s table: %w", table, err)
	}
	return ParseTable(out), nil
}

// SplitRule splits a rule into its arguments the way iptables-restore
// does: on blanks, except inside double quotes (which stay in the token).
func SplitRule(rule string) ([]string, error) {
	var out []string
	var cur []byte
	inQuote, have := false, false
	for i := 0; i < len(rule); i++ {
		ch := rule[i]
		switch {
		case ch == '"':
			inQuote = !inQuote
			cur = append(cur, ch)
			have = true
		case (ch == ' ' || ch == '\t') && !inQuote:
			if have {
				out = append(out, string(cur))
				cur = cur[:0]
				have = false
			}
		default:
			cur = append(cur, ch)
			have = true
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unterminated quote in %q", rule)
	}
	if have {
		out = append(out, string(cur))
	}
	return out, nil
}
