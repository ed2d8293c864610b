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
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodenet/nodenet/proxy/proxycmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := proxycmd.Run(ctx, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return // the flag set printed the help the user asked for
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodenet-proxy: %v\n", err)
		os.Exit(1)
	}
}
