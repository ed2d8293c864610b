// Package cli is the command-line plumbing every nodenet command shares, so
// the multi-call binary (cmd/nodenet) and the single-purpose ones
// (cmd/nodenet-proxy) parse the same flags the same way: the repeatable
// list flags, --log-level/--log-format and the logger they build (klog
// routed into it), the API client from --kubeconfig or the in-cluster
// config, and the node's name.
package cli
