package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/node/shim"
)

// build builds this command as shipped (static) into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "nodenet-shim")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// The binary end to end, as the agent runs it: a container whose volume
// is bound through the second stage (the binary re-running itself), its
// output in the log; and the second stage alone, as a CNI plugin runs,
// passing stdin, stdout and the exit code through.
func TestShimBindsVolumes(t *testing.T) {
	nettest.RequirePrivileged(t)
	bin := build(t)
	vol, target := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(vol, "f"), []byte("from the volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "0.log")
	args, err := shim.Options{Log: log, Mounts: []shim.Mount{{Source: vol, Target: target, ReadOnly: true}},
		Argv: []string{"/bin/sh", "-c", "cat " + target + "/f; touch " + target + "/g 2>/dev/null || echo read-only >&2"}}.Args()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("shim: %v\n%s", err, out)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), " stdout P from the volume\n") || !strings.Contains(string(b), " stderr F read-only\n") {
		t.Errorf("log:\n%s", b)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("the bind reached the agent's mount namespace: %s holds %v", target, ents)
	}

	stage, err := shim.ExecStage([]string{bin}, []shim.Mount{{Source: vol, Target: target}}, []string{"/bin/sh", "-c", "cat " + target + "/f -; exit 7"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(stage[0], stage[1:]...)
	cmd.Stdin = strings.NewReader(" and stdin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 || string(out) != "from the volume and stdin" {
		t.Errorf("exec stage: %q, %v", out, err)
	}
	// A mount that cannot be made fails before the command runs.
	bad, _ := json.Marshal([]shim.Mount{{Source: filepath.Join(vol, "missing"), Target: target}})
	cmd = exec.Command(bin, "--exec", "--mounts", string(bad), "--", "/bin/echo", "ran")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if out, err := cmd.CombinedOutput(); err == nil || strings.Contains(string(out), "ran") || !strings.Contains(string(out), "missing") {
		t.Errorf("missing volume source: %q, %v", out, err)
	}
}
