// Package shim is what runs between the node agent and a pod's processes:
// the container shim, which writes a container's output as CRI log lines
// and outlives the agent (RunLogShim), and its second stage, which binds
// volumes in a private mount namespace and execs the command
// (ExecWithMounts), also used to run CNI plugins in a node's view of the
// filesystem.
//
// These run for every container start and every CNI plugin exec, so the
// package imports only the standard library and x/sys: the dedicated
// binary cmd/nodenet-shim links nothing else and starts in a fraction of
// the multi-call nodenet's time (which also runs it, as `nodenet
// logshim`, when nodenet-shim was not built). Main is both binaries'
// command line.
package shim
