package upstream

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestUnreachableProxyIsTheEnvironment: with the module proxy out of reach
// (GOPROXY=off, an empty module cache) the build reports ErrModuleProxy,
// which Flanneld turns into a skip (a failure under NODENET_PRIVILEGED),
// and writes no binary.
func TestUnreachableProxyIsTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("GOPROXY", "off")
	t.Setenv("GOMODCACHE", filepath.Join(t.TempDir(), "mod"))
	bin := filepath.Join(dir, "flanneld")
	err := runBuild(context.Background(), dir, flanneldRecipe, bin)
	if !errors.Is(err, ErrModuleProxy) {
		t.Fatalf("got %v, want ErrModuleProxy", err)
	}
}

func TestFlanneldRecipeDropsOnlyTencentVPC(t *testing.T) {
	mod, dir := t.TempDir(), t.TempDir()
	src := "package main\n\nimport (\n\t\"fmt\"\n\t_ \"github.com/flannel-io/flannel/pkg/backend/tencentvpc\"\n\t_ \"github.com/flannel-io/flannel/pkg/backend/vxlan\"\n)\n"
	if err := writeFile(filepath.Join(mod, "main.go"), src); err != nil {
		t.Fatal(err)
	}
	if err := flanneldRecipe.generate(dir, mod); err != nil {
		t.Fatal(err)
	}
	got, err := readFile(filepath.Join(dir, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	want := "package main\n\nimport (\n\t\"fmt\"\n\t_ \"github.com/flannel-io/flannel/pkg/backend/vxlan\"\n)\n"
	if got != want {
		t.Fatalf("main.go:\n%s\nwant:\n%s", got, want)
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}
