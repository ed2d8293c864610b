package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"syscall"

	"github.com/nodenet/nodenet/cni"
	"github.com/nodenet/nodenet/cni/protocol"
)

const about = "nodenet-cni: cni0 bridge + veth + in-process host-local IPAM for nodenet and flannel networks"

// envReap marks a reaper process (see spawnReaper).
const envReap = "NODENET_CNI_REAP"

func init() {
	// No allocation profile: nothing reads it, and its first sample, due
	// within the process's life, walks the stack through pages of the
	// binary that would otherwise never be faulted in.
	runtime.MemProfileRate = 0
}

// pod is the pod namespace of an ADD or DEL, opened during package
// initialization: the runtime keeps this goroutine on the main thread
// until main starts, so the namespace switch needs no LockOSThread and no
// extra thread (see cni.PreparePod).
var pod = preparePod()

func preparePod() *cni.PreparedPod {
	if cmd := os.Getenv("CNI_COMMAND"); (cmd != "ADD" && cmd != "DEL") || os.Getenv(envReap) != "" {
		return nil
	}
	pp, err := cni.PreparePod(os.Getenv("CNI_NETNS"))
	if err != nil {
		// This thread is stuck in the pod's namespace: nothing may run.
		b, _ := json.Marshal(protocol.AsWireError(err))
		os.Stdout.Write(b)
		os.Exit(1)
	}
	return pp
}

func main() {
	if os.Getenv(envReap) != "" {
		if err := cni.RunReaper(); err != nil {
			fmt.Fprintln(os.Stderr, "nodenet-cni reaper:", err)
			os.Exit(1)
		}
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := &cni.Plugin{Log: log, Reaper: spawnReaper, Prepared: pod}
	installTestHooks(p)
	os.Exit(protocol.Main(context.Background(), p, os.Getenv, os.Stdin, os.Stdout, os.Stderr, about))
}

// spawnReaper makes sure a reaper deletes the veth pairs DEL has cut off,
// so DEL returns without waiting the 10-20 ms the kernel takes to
// unregister them: if none is at work in this network namespace, it starts
// a copy of this binary (which inherits the namespace) in its own session
// and with no stdio (the runtime waits for EOF on our stdout). If a reaper
// never finishes, the next one or GC deletes the pairs.
func spawnReaper() error {
	if cni.ReaperRunning() {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	proc, err := os.StartProcess(exe, []string{exe}, &os.ProcAttr{
		Env:   []string{envReap + "=1"},
		Files: []*os.File{null, null, null},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return fmt.Errorf("start reaper: %w", err)
	}
	return proc.Release()
}
