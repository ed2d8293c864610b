// Command nodenet is the multi-call binary of the nodenet suite: one
// subcommand per component — apiserver, controller-manager, flanneld,
// proxy and agent — plus up, down and status for a local cluster of
// network namespaces, and the helpers those start (echo; logshim, the
// agent's shim when nodenet-shim was not built; and loadgen, the chaos
// suite's client).
// `nodenet help` lists them; `nodenet <command> --help` lists a command's
// flags.
//
// Flags are parsed here and in the packages this binary shares with the
// single-purpose ones (internal/cli, proxy/proxycmd): each subcommand turns
// its flags into the typed options of its package and runs it until
// SIGINT or SIGTERM. One binary for every component lets the local cluster
// start any component as a process of the same executable; a node needs
// it beside the lean binaries exec'd per pod, the CNI plugin
// (cmd/nodenet-cni) and the agent's shim (cmd/nodenet-shim), and the proxy
// alone (cmd/nodenet-proxy), which the DaemonSet runs because a process's
// resident memory counts the pages of the binary it touches.
package main
