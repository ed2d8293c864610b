package netnsutil_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDeps: the lean CNI binary links this package (see TestLean in
// cmd/nodenet-cni), so it may import only the standard library, without
// package net, and golang.org/x/sys/unix.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		if d != "github.com/nodenet/nodenet/internal/netnsutil" && d != "golang.org/x/sys/unix" {
			t.Errorf("netnsutil depends on %s", d)
		}
	}
	out, err = exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if slices.Contains(strings.Fields(string(out)), "net") {
		t.Error("netnsutil depends on package net")
	}
}
