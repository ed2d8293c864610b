package iptables

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// hintChains mark the backend a node's components use: the kubelet's and
// kube-proxy's (as iptables-wrapper looks for them) and ours.
var hintChains = []string{":KUBE-IPTABLES-HINT ", ":KUBE-KUBELET-CANARY ", ":NODENET-"}

// holdings is what one backend holds in one family.
type holdings struct {
	hint  bool // a hint chain is declared
	rules int  // number of rules
}

func (h holdings) empty() bool { return !h.hint && h.rules == 0 }

// Detect chooses the backend for family, as iptables-wrapper does for
// kube-proxy: the backend that holds hint chains (and the other does not)
// wins; otherwise the one with more rules; with a tie (typically a fresh
// host, both empty) the host's `iptables` alternative — nft when its
// version cannot be read. So a host whose rules live in iptables-legacy gets
// legacy from every component, and every component agrees.
//
// It costs two short commands on a host without legacy tables (the legacy
// dump, which never loads a kernel module, and `iptables --version`); the
// nft dump, which can be large, is read only when the answer depends on it.
func Detect(ctx context.Context, exec Exec, family Family) (Backend, error) {
	var alt Backend
	host := func() Backend {
		if alt == "" {
			alt = alternative(ctx, exec, family)
		}
		return alt
	}
	legacy, lerr := survey(ctx, exec, family, Legacy)
	if lerr == nil && legacy.empty() && host() == NFT {
		return NFT, nil // legacy could win only a tie, which the alternative decides
	}
	nft, nerr := survey(ctx, exec, family, NFT)
	switch {
	case lerr != nil && nerr != nil:
		return "", fmt.Errorf("detect the iptables backend for %s: %w", family, errors.Join(lerr, nerr))
	case lerr != nil:
		return NFT, nil
	case nerr != nil:
		return Legacy, nil
	}
	return choose(legacy, nft, host), nil
}

// choose is Detect's decision, given what each backend holds; alt is asked
// only on a tie.
func choose(legacy, nft holdings, alt func() Backend) Backend {
	switch {
	case nft.hint && !legacy.hint:
		return NFT
	case legacy.hint && !nft.hint:
		return Legacy
	case legacy.rules > nft.rules:
		return Legacy
	case nft.rules > legacy.rules:
		return NFT
	}
	return alt()
}

// survey dumps every table the backend has in this namespace. Without -t,
// iptables-legacy-save lists only tables that already exist, so probing
// never creates legacy tables (or loads their modules) on an nft host.
func survey(ctx context.Context, exec Exec, family Family, b Backend) (holdings, error) {
	bin := binary(family, b, "save")
	out, stderr, err := exec(ctx, nil, bin)
	if err != nil {
		return holdings{}, newError(bin, "", err, stderr)
	}
	var h holdings
	for line := range strings.Lines(string(out)) {
		switch {
		case strings.HasPrefix(line, "-A "):
			h.rules++
		case strings.HasPrefix(line, ":"):
			for _, c := range hintChains {
				if strings.HasPrefix(line, c) {
					h.hint = true
				}
			}
		}
	}
	return h, nil
}

// alternative is the backend the host's plain `iptables` command uses:
// "iptables v1.8.9 (legacy)" or "(nf_tables)".
func alternative(ctx context.Context, exec Exec, family Family) Backend {
	bin := "iptables"
	if family == IPv6 {
		bin = "ip6tables"
	}
	out, _, err := exec(ctx, nil, bin, "--version")
	if err == nil && strings.Contains(string(out), "legacy") {
		return Legacy
	}
	return NFT
}
