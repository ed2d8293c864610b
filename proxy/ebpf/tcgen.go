package ebpf

// The tc programs are a second object beside socklb (see bpf/tcnat.c); its
// output is committed like socklb's and checked by the same freshness test.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target bpfel -type src_key tcnat bpf/tcnat.c -- -I/usr/include/x86_64-linux-gnu -O2 -Wall -Werror
