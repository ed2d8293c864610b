package nlmsg

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: the package links only the standard library (not
// package net) and golang.org/x/sys, since the CNI binary links it and
// every package it brings along adds to each pod's start-up.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(d, "/")
		switch {
		case d == "net":
			t.Error("depends on package net")
		case d == "github.com/nodenet/nodenet/internal/nlmsg", strings.HasPrefix(d, "golang.org/x/sys/"):
		case strings.Contains(first, "."):
			t.Errorf("depends on %s", d)
		}
	}
}
