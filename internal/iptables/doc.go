// Package iptables runs iptables-save, iptables-restore and iptables for
// every nodenet component that programs the firewall through iptables: the
// proxy's iptables data plane, flanneld's ip-masq and the CNI plugin's
// ipMasq. It exists so that all three program the same backend on a host.
//
// iptables 1.8 ships two backends with the same command line, iptables-nft
// (the kernel's nf_tables) and iptables-legacy (the old x_tables). Rules
// written through one are invisible to the other, so a daemon that picks a
// different backend than the rest of the node installs rules the node's
// traffic never meets. Detect decides the way Kubernetes' iptables-wrapper
// does for kube-proxy and the kubelet: the backend that already holds the
// hint chains (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY, or our own
// NODENET-* chains) wins, otherwise the one holding more rules; when neither
// holds anything the host's `iptables` alternative decides (nft when it
// cannot be run). The decision is per IP family.
//
// Every write is one `iptables-restore --noflush --wait=5` (Batch builds
// its input), so a change is one atomic transaction per table and never
// disturbs rules we do not own. Every command that takes the xtables lock
// waits for it up to five seconds, as kube-proxy does; iptables-save takes
// no lock. Failures are *Error values naming the binary, the table and the
// input line the tool blamed, with its stderr; the message text is
// classified here and nowhere else into ErrNotExist, ErrLocked and
// ErrNotInstalled, which callers test with errors.Is.
//
// Fake is a stateful in-memory iptables with the same Runner interface; a
// contract test runs the same operations against it and against both real
// backends in throwaway network namespaces and requires the same
// iptables-save output.
//
// The package links only the standard library and no package net or
// regexp: the CNI plugin binary, which must start fast, uses it.
package iptables
