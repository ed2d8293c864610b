package ebpf

// The BPF object is generated and committed, so building nodenet needs no
// clang; TestGeneratedObjectIsFresh regenerates it and fails on a diff.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target bpfel -type svc_key -type svc_value -type backend_key -type addrport -type rev_key -type aff_key -type aff_value -type local_addr socklb bpf/socklb.c -- -I/usr/include/x86_64-linux-gnu -O2 -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -tags linux -target bpfel -type doomed_key sockdestroy bpf/sockdestroy.c -- -I/usr/include/x86_64-linux-gnu -O2 -Wall -Werror
