package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// docker runs the docker CLI.
type docker struct{ bin string }

func (d docker) command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, d.bin, args...)
}

func (d docker) run(ctx context.Context, args ...string) (string, error) {
	out, err := d.command(ctx, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func (d docker) imageExists(ctx context.Context, ref string) bool {
	_, err := d.run(ctx, "image", "inspect", "--format", "{{.Id}}", ref)
	return err == nil
}

// waitExec retries a command in a container for up to tries seconds.
func (d docker) waitExec(ctx context.Context, name string, tries int, args ...string) error {
	var err error
	for i := 0; i < tries; i++ {
		if _, err = d.run(ctx, append([]string{"exec", name}, args...)...); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return err
}

// privilegedFlags replace --privileged, which this Docker refuses: the
// host's capability bounding set lacks CAP_SYS_RESOURCE, so runc cannot
// grant "all" capabilities. Everything else --privileged implies is asked
// for one by one: other capabilities, no seccomp, writable /proc and /sys,
// every device node allowed, and the devices the node needs.
var privilegedFlags = []string{
	"--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
	"--security-opt", "seccomp=unconfined", "--security-opt", "systempaths=unconfined",
	"--device-cgroup-rule", "a *:* rwm", "--device", "/dev/kmsg", "--device", "/dev/fuse",
}

// wrapperScript is the docker kind runs (first on its PATH): --privileged
// becomes privilegedFlags on `run` and is dropped on `exec`, and the
// host's /lib/modules (absent here) is an empty directory.
func wrapperScript(realDocker, emptyModules string) string {
	var flags []string
	for _, f := range privilegedFlags {
		flags = append(flags, fmt.Sprintf("%q", f))
	}
	return fmt.Sprintf(`#!/bin/bash
# Written by bench/kind (nodenet): kind's docker on this machine. See bench/kind/README.md.
cmd=$1
out=()
for a in "$@"; do
	case "$cmd:$a" in
	run:--privileged) out+=(%s) ;;
	exec:--privileged) ;;
	run:/lib/modules:/lib/modules:ro) out+=(%q) ;;
	*) out+=("$a") ;;
	esac
done
exec %q "${out[@]}"
`, strings.Join(flags, " "), emptyModules+":/lib/modules:ro", realDocker)
}

// installWrapper writes the wrapper into dir/bin and returns that
// directory, to put first on kind's PATH.
func installWrapper(c cache) (string, error) {
	real, err := exec.LookPath("docker")
	if err != nil {
		return "", fmt.Errorf("docker: %w", err)
	}
	bin := filepath.Join(c.root, "wrapper", "bin")
	mods := filepath.Join(c.root, "wrapper", "empty-modules")
	for _, d := range []string{bin, mods} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	return bin, os.WriteFile(filepath.Join(bin, "docker"), []byte(wrapperScript(real, mods)), 0o755)
}
