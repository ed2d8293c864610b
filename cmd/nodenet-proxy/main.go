// Command nodenet-proxy is the proxy alone: `nodenet proxy` (the same
// flags, the same code, proxy/proxycmd) in a binary without the API
// server, etcd, the controllers and the local cluster.
//
// Why a second binary: a process's resident memory counts the pages of its
// executable it touches, and the multi-call `nodenet`, which links
// everything, costs an idle proxy about twice the memory of this one
// (bench/README.md, BenchmarkProxyProcess). The proxy runs on every node,
// so the DaemonSet runs this binary, as kube-proxy is its own binary.
package main

import (
	"os"

	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/proxy/proxycmd"
)

func main() {
	cli.RunCommand("nodenet-proxy", proxycmd.Run, os.Args[1:])
}
