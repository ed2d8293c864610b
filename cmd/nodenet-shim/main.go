// Command nodenet-shim is the node agent's per-container shim and the
// mount stage of its containers and CNI plugins (package node/shim):
// `nodenet logshim` without the multi-call binary's start-up cost, since
// it runs several times per pod start and stop.
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/nodenet/nodenet/node/shim"
)

func main() {
	// No allocation profile: nothing reads it (as in nodenet-cni).
	runtime.MemProfileRate = 0
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodenet-shim: %v\n", err)
		os.Exit(127)
	}
	os.Exit(shim.Main([]string{self}, os.Args[1:]))
}
