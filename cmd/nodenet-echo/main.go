// Command nodenet-echo is `nodenet echo` without the multi-call binary's
// start-up cost: the echo server of the local cluster's demo and chaos
// pods (packages node/echo, node/echo/echocmd). The agent runs it for `nodenet echo` when it
// was built beside nodenet, so a pod starts in milliseconds rather than
// paying for every package nodenet links; under endpoint churn (ten pods a
// second) that start-up was most of a two-core machine's CPU.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/nodenet/nodenet/node/echo/echocmd"
)

func main() {
	// No allocation profile: nothing reads it (as in nodenet-shim).
	runtime.MemProfileRate = 0
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := echocmd.Command(ctx, "nodenet-echo", os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "nodenet-echo: %v\n", err)
		os.Exit(1)
	}
}
