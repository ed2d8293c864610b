// Command nodenet-cni is the nodenet CNI plugin binary: the runtime execs it
// with CNI_* variables and the network configuration on stdin, and it
// prints the result (or a CNI error object) on stdout. Logs go to stderr.
// Install it as /opt/cni/bin/nodenet, or as /opt/cni/bin/flannel to serve
// an existing flannel conflist.
//
// Build it static, as the reference plugins are shipped:
//
//	CGO_ENABLED=0 go build -o /opt/cni/bin/nodenet ./cmd/nodenet-cni
//
// A cgo build links libc dynamically (package net), and the dynamic loader
// alone then costs about a millisecond per exec, a third of an ADD.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/nodenet/nodenet/cni"
)

const about = "nodenet-cni: cni0 bridge + veth + in-process host-local IPAM for nodenet and flannel networks"

// envReap marks a reaper process (see spawnReaper).
const envReap = "NODENET_CNI_REAP"

func main() {
	if os.Getenv(envReap) != "" {
		if err := cni.RunReaper(); err != nil {
			fmt.Fprintln(os.Stderr, "nodenet-cni reaper:", err)
			os.Exit(1)
		}
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := &cni.Plugin{Log: log, Reaper: spawnReaper}
	installTestHooks(p)
	ctx := context.Background()
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: func(args *skel.CmdArgs) error {
			res, err := p.Add(ctx, args)
			if err != nil {
				return cni.AsTypesError(err)
			}
			return res.Print()
		},
		Del:    func(args *skel.CmdArgs) error { return wire(p.Del(ctx, args)) },
		Check:  func(args *skel.CmdArgs) error { return wire(p.Check(ctx, args)) },
		GC:     func(args *skel.CmdArgs) error { return wire(p.GC(ctx, args)) },
		Status: func(args *skel.CmdArgs) error { return wire(p.Status(ctx, args)) },
	}, cni.SupportedVersions, about)
}

// wire turns an error into the CNI error object skel prints; a nil
// *types.Error must not become a non-nil error.
func wire(err error) error {
	if err == nil {
		return nil
	}
	return cni.AsTypesError(err)
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
