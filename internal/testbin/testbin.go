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

// Build returns a directory holding nodenet, nodenet-proxy, nodenet-cni,
// nodenet-shim and nodenet-echo, built on the first call (as `make build` lays them out, so
// an agent maps the image's paths to them and runs its shim as it does in
// `make run`). nodenet-cni, nodenet-shim and nodenet-echo are built as
// shipped: static, so each exec per pod skips the dynamic loader.
func Build(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "nodenet-bin-"); err != nil {
			return
		}
		for pkg, out := range map[string]string{"./cmd/nodenet": "nodenet", "./cmd/nodenet-proxy": "nodenet-proxy", "./cmd/nodenet-cni": "nodenet-cni", "./cmd/nodenet-shim": "nodenet-shim", "./cmd/nodenet-echo": "nodenet-echo"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
			cmd.Dir = root()
			if out != "nodenet" && out != "nodenet-proxy" {
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
