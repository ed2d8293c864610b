// Package bpfgen is a test helper for packages that commit bpf2go output:
// it checks that the committed object and Go bindings are what the C source
// generates today.
package bpfgen

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CheckFresh regenerates the bpf2go output of every generate line of the
// file gen, in the package pkg (its name, as GOPACKAGE), into a temporary
// directory and requires the committed files to be identical: a C change
// without `go generate` (or a stale .o) fails. Run from the package's
// directory, as `go test` does.
func CheckFresh(t *testing.T, pkg, gen string) {
	t.Helper()
	src, err := os.ReadFile(gen)
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]string
	for _, l := range strings.Split(string(src), "\n") {
		if cmd, ok := strings.CutPrefix(l, "//go:generate "); ok {
			lines = append(lines, strings.Fields(cmd))
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s has no generate line", gen)
	}
	for _, args := range lines {
		checkGenerated(t, pkg, gen, args)
	}
}

// checkGenerated runs one `go run …/bpf2go <flags> <ident> <source> …`
// line into a temporary directory and compares its output with the
// committed <ident>_bpfel.go/.o.
func checkGenerated(t *testing.T, pkg, gen string, args []string) {
	t.Helper()
	if len(args) < 3 || args[0] != "go" || !strings.HasSuffix(args[2], "/bpf2go") {
		t.Fatalf("%s has a generate line that is not `go run …/bpf2go`: %q", gen, args)
	}
	ident := ""
	for i, a := range args[3:] {
		if strings.HasSuffix(a, ".c") && i > 0 {
			ident = args[3+i-1]
		}
	}
	if ident == "" {
		t.Fatalf("generate line names no C source: %q", args)
	}
	out := t.TempDir()
	args = append(append(args[:3:3], "-output-dir", out), args[3:]...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "GOPACKAGE="+pkg, "GOFILE="+gen)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bpf2go: %v\n%s", err, b)
	}
	for _, f := range []string{ident + "_bpfel.go", ident + "_bpfel.o"} {
		want, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `go generate` in its package and commit the result", f)
		}
	}
}
