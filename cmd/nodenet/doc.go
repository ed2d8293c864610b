// Command nodenet is the multi-call binary of the nodenet suite: one
// subcommand per component — apiserver, controller-manager, flanneld,
// proxy and agent — plus up, down and status for a local cluster of
// network namespaces, and the helpers those start (echo; logshim, the
// agent's shim when nodenet-shim was not built; and loadgen, the chaos
// suite's client).
// `nodenet help` lists them; `nodenet <command> --help` lists a command's
// flags.
//
// This is the only place flags are parsed: each subcommand turns its flags
// into the typed options of its package and runs it until SIGINT or
// SIGTERM. One binary for every component keeps a node's install to a few
// files (this, and the lean binaries exec'd per pod: the CNI plugin,
// cmd/nodenet-cni, and the shim, cmd/nodenet-shim) and lets the local
// cluster start any component as a process of the same executable.
package main
