// Package proxycmd is the proxy's command: kube-proxy's flags (--proxy-mode,
// --kubeconfig, --cluster-cidr, --nodeport-addresses, the ipvs and ebpf
// mode flags …) parsed into proxy/app's options and the explicit map of
// data planes this build carries (iptables, nftables, ipvs, ebpf), run until
// the context ends. Two binaries run it: the multi-call `nodenet proxy`
// (what the local cluster's tests start) and `nodenet-proxy`
// (cmd/nodenet-proxy), the proxy alone, which the DaemonSet runs: it links
// no API server, etcd or controllers, so a node's proxy maps about half
// the executable pages (bench/README.md, BenchmarkProxyProcess).
//
// DefaultModes serves the other commands that need the mode map without a
// proxy's flags: `nodenet cleanup`, `up` and `manifest` check or clean up
// a mode with its defaults.
package proxycmd
