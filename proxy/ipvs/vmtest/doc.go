// Package vmtest runs a Go test binary inside a throwaway virtual machine
// booted from Debian's kernel, for kernel features this machine's kernel
// lacks (IPVS, the dummy device).
//
// Nothing is installed on the host. The kernel package is fetched with
// `apt-get download` (its versioned name resolved from linux-image-amd64)
// and unpacked with `dpkg -x` into a cache outside the repository
// ($XDG_CACHE_HOME or ~/.cache, under nodenet/vmtest/<package>), where the
// uncompressed vmlinux is extracted from vmlinuz (qemu boots it directly,
// via PVH, skipping the decompressor) and a base initramfs is built once:
// busybox-static, the netfilter/IPVS/veth/dummy modules with a modules.dep
// from busybox depmod, ipvsadm, ip, nft, iptables and ipset with the
// libraries ldd lists for them, and an init script. Each run appends a
// second, small cpio archive holding the test binary and a run script (the
// kernel unpacks concatenated archives), so a second run costs the boot
// alone.
//
// Run boots `qemu-system-x86_64 -accel tcg` (no KVM on this machine or in
// CI) with the serial console on the host's pipe; the guest loads the
// modules, runs the binary with the given arguments and environment, prints
// one result line carrying the exit status and powers off. Run returns the
// console output and the status. TCG is slow: a boot takes seconds, and
// what runs inside must not make timed assertions.
package vmtest
