// Command kind builds real Kubernetes clusters with kind on a machine
// with no registry (only Debian's archive and the Go module proxy),
// deploys nodenet by its DaemonSet, checks its traffic and runs the
// netperf benchmark: `make kind`, `make kind-down`, `make bench-kind`.
//
// Everything it builds is cached outside the repository, under
// ~/.cache/nodenet/kind, one directory per artifact keyed by a hash of its
// inputs (cache.go): kind, crictl, etcd and the Kubernetes binaries from
// scratch modules (gobuild.go), the node's Debian root file system
// (debootstrap), one-binary component images, the node image (assembled
// with docker import, then containerd inside it given the component
// images, then docker commit: nodeimage.go) and the bench image (netperf
// from non-free, iperf3: images.go, apt.go). Each step prints its start,
// a line every 30 s and its duration (progress.go).
//
// Data planes: nodenet (its DaemonSet, proxy modes iptables, nftables and
// ebpf; ebpf only where every node has a cgroup v2 hierarchy that is a
// cgroup of its own on the host and a bpf file system, ebpf.go, and
// otherwise skipped with the reason) and
// upstream (upstream.go): flanneld v0.28.10 deployed in the shape of
// kube-flannel.yml with nodenet's flannel-compatible CNI plugin (flannel's
// own is refused by the module proxy) and kube-proxy v1.37.2 deployed by
// kubeadm's addon, each in an image built on the same Debian userland
// layer as nodenet's. The benchmark measures each on a fresh cluster of
// the same shape and judges issue 15's targets in the report.
//
// This Docker refuses --privileged, so kind runs behind a docker wrapper
// that asks for the same privileges one by one (docker.go); the other
// local workarounds are in nodeimage.go and cluster.go. See README.md.
//
// Subpackages: report (Markdown and SVG from a results file) and pause
// (the pod sandbox's process).
package main
