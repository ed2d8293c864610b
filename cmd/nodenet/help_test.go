package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestHelpExitsZero: `nodenet <command> --help` is a request, not an error
// (exit 0, the flags on the output); `nodenet` alone is a usage error (exit
// non-zero, the commands listed).
func TestHelpExitsZero(t *testing.T) {
	run := func(args ...string) (string, int) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "NODENET_TEST_EXEC=1")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			return string(out), exit.ExitCode()
		case err != nil:
			t.Fatalf("run nodenet %v: %v", args, err)
		}
		return string(out), 0
	}
	for name := range subcommands() {
		if name == "version" {
			continue // takes no flags
		}
		out, code := run(name, "--help")
		if code != 0 || !strings.Contains(out, "-") || strings.Contains(out, "help requested") {
			t.Errorf("nodenet %s --help: exit %d, output:\n%s", name, code, out)
		}
	}
	if out, code := run("--help"); code != 0 || !strings.Contains(out, "commands:") {
		t.Errorf("nodenet --help: exit %d, output:\n%s", code, out)
	}
	if out, code := run(); code == 0 || !strings.Contains(out, "commands:") {
		t.Errorf("nodenet (no command): exit %d, want non-zero with the usage; output:\n%s", code, out)
	}
}
