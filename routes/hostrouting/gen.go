package hostrouting

// The BPF object is generated and committed, so building nodenet needs no
// clang; TestGeneratedObjectIsFresh regenerates it and fails on a diff.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target bpfel -type net_key -type bridge -type mac_key hostrouting bpf/hostrouting.c -- -I/usr/include/x86_64-linux-gnu -O2 -Wall -Werror
