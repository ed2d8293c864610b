package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	err  error
)

// root is the module root, found from this file's place in it.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build returns a directory holding nodenet, nodenet-proxy and nodenet-cni,
// built on the first call (as `make build` lays them out, so an agent maps
// the image's paths to them as it does in `make run`). nodenet-cni is built as shipped: static, so each plugin exec
// skips the dynamic loader.
func Build(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "nodenet-bin-"); err != nil {
			return
		}
		for pkg, out := range map[string]string{"./cmd/nodenet": "nodenet", "./cmd/nodenet-proxy": "nodenet-proxy", "./cmd/nodenet-cni": "nodenet-cni"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
			cmd.Dir = root()
			if out == "nodenet-cni" {
				cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			}
			if b, berr := cmd.CombinedOutput(); berr != nil {
				err = fmt.Errorf("build %s: %w\n%s", pkg, berr, b)
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Remove deletes the binaries; call it from TestMain after m.Run.
func Remove() {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}
