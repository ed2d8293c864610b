//go:build nodenet_cnitest

package main

import (
	"os"
	"strconv"
	"time"

	"github.com/nodenet/nodenet/cni"
)

// EnvHold names a file: when set, ADD writes its pid there once it has
// reserved its addresses and created the veth, then waits to be killed.
// Only binaries built with -tags nodenet_cnitest have this hook.
const EnvHold = "NODENET_CNI_TEST_HOLD"

func installTestHooks(p *cni.Plugin) {
	marker := os.Getenv(EnvHold)
	if marker == "" {
		return
	}
	p.AfterReserve = func() {
		if err := os.WriteFile(marker, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			os.Exit(3)
		}
		time.Sleep(time.Hour)
	}
}
