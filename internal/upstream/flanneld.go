package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/periodic"
)

// FlanneldVersion is the upstream flanneld the interoperability tests run.
const FlanneldVersion = "v0.28.10"

const flannelModule = "github.com/flannel-io/flannel"

// ErrModuleProxy marks a failure to fetch sources from the module proxy
// (unreachable, or refusing): the environment, not the build, is at fault.
var ErrModuleProxy = errors.New("module proxy")

// Flanneld returns the path of an upstream flanneld binary, building it
// when it is missing. A module proxy that cannot be reached skips the test
// (fails it under NODENET_PRIVILEGED); any other build failure fails it.
func Flanneld(t testing.TB) string {
	t.Helper()
	bin, err := BuildFlanneld(t.Logf)
	if errors.Is(err, ErrModuleProxy) {
		nettest.Require(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildFlanneld is Flanneld for programs rather than tests (the kind
// benchmark's flannel image): the path of the cached upstream flanneld,
// built first when missing, with progress through logf. Errors from the
// module proxy wrap ErrModuleProxy.
func BuildFlanneld(logf func(format string, args ...any)) (string, error) {
	dir, err := cacheDir("flanneld-" + FlanneldVersion)
	if err != nil {
		return "", err
	}
	bin, err := build(logf, dir, flanneldRecipe)
	if err != nil {
		return "", fmt.Errorf("build upstream flanneld %s: %w", FlanneldVersion, err)
	}
	return bin, nil
}

// cacheDir is where a build lives: the user cache (~/.cache/nodenet/upstream),
// shared by every clone and worktree on the machine.
func cacheDir(name string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find a cache directory for upstream builds: %w", err)
	}
	dir := filepath.Join(base, "nodenet", "upstream", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	return dir, nil
}

// recipe writes the scratch module's sources into dir (go.mod and the
// main package) given the upstream module's directory in the module cache,
// and names the package and ldflags to build.
type recipe struct {
	name     string
	module   string // module@version whose sources the build needs
	generate func(dir, moduleDir string) error
	ldflags  string
	pkg      string // the main package to build; "" is the scratch module itself
}

// flanneldRecipe: upstream's `go install` is refused because one backend
// (tencentvpc) depends on a module version the proxy does not serve, so
// the scratch module's main.go is upstream's main.go without that import.
var flanneldRecipe = recipe{
	name:   "flanneld",
	module: flannelModule + "@" + FlanneldVersion,
	generate: func(dir, moduleDir string) error {
		src, err := os.ReadFile(filepath.Join(moduleDir, "main.go"))
		if err != nil {
			return fmt.Errorf("read upstream main.go: %w", err)
		}
		var out bytes.Buffer
		for _, line := range strings.SplitAfter(string(src), "\n") {
			if !strings.Contains(line, `"`+flannelModule+`/pkg/backend/tencentvpc"`) {
				out.WriteString(line)
			}
		}
		gomod := fmt.Sprintf("module nodenet.local/upstream/flanneld\n\ngo 1.26\n\nrequire %s %s\n", flannelModule, FlanneldVersion)
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
			return fmt.Errorf("write go.mod: %w", err)
		}
		return os.WriteFile(filepath.Join(dir, "main.go"), out.Bytes(), 0o644)
	},
	ldflags: "-X " + flannelModule + "/pkg/version.Version=" + FlanneldVersion,
}

// stamp identifies what built a binary: a binary built by another Go
// version or recipe is rebuilt.
func (r recipe) stamp() string {
	return fmt.Sprintf("%s %s %s\n", r.module, runtime.Version(), r.ldflags)
}

// build returns dir/<name>, building it under an exclusive lock on
// dir/.lock so parallel tests (other packages, other worktrees) build once
// and the others wait and reuse it.
func build(logf func(format string, args ...any), dir string, r recipe) (string, error) {
	bin, stampFile := filepath.Join(dir, r.name), filepath.Join(dir, r.name+".stamp")
	fresh := func() bool { return built(dir, r) }
	if fresh() {
		return bin, nil
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("open build lock: %w", err)
	}
	defer lock.Close()
	logf("upstream %s: waiting for the build lock in %s", r.name, dir)
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if fresh() { // built by whoever held the lock
		return bin, nil
	}
	start := time.Now()
	logf("upstream %s: building %s in %s (a cold build takes tens of minutes on 2 cores; later runs reuse it)", r.name, r.module, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go progress(ctx, logf, r.name, start)
	if err := runBuild(ctx, dir, r, bin); err != nil {
		return "", err
	}
	if err := os.WriteFile(stampFile, []byte(r.stamp()), 0o644); err != nil {
		return "", fmt.Errorf("write build stamp: %w", err)
	}
	logf("upstream %s: built in %s", r.name, time.Since(start).Round(time.Second))
	return bin, nil
}

// built reports whether dir holds r's binary, built by this Go and recipe.
func built(dir string, r recipe) bool {
	bin := filepath.Join(dir, r.name)
	s, err := os.ReadFile(bin + ".stamp")
	_, berr := os.Stat(bin)
	return err == nil && berr == nil && string(s) == r.stamp()
}

func progress(ctx context.Context, logf func(format string, args ...any), name string, start time.Time) {
	periodic.Every(ctx, 30*time.Second, func(context.Context) {
		logf("upstream %s: still building (%s)", name, time.Since(start).Round(time.Second))
	})
}

func runBuild(ctx context.Context, dir string, r recipe, bin string) error {
	// A scratch module of its own: no workspace, no repository go.mod, the
	// installed toolchain.
	env := append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod")
	goCmd := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return out, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return out, nil
	}
	// The download alone tells an unreachable proxy from a broken build.
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module nodenet.local/upstream/download\n\ngo 1.26\n"), 0o644); err != nil {
		return fmt.Errorf("write go.mod: %w", err)
	}
	out, err := goCmd("mod", "download", "-json", r.module)
	if err != nil {
		return fmt.Errorf("%w: download %s: %w", ErrModuleProxy, r.module, err)
	}
	var dl struct{ Dir, Error string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.Dir == "" {
		return fmt.Errorf("%w: download %s: %s (%v)", ErrModuleProxy, r.module, dl.Error, err)
	}
	if err := r.generate(dir, dl.Dir); err != nil {
		return err
	}
	if _, err := goCmd("mod", "tidy"); err != nil {
		// tidy fetches the dependencies: a failure here is the proxy's too.
		return fmt.Errorf("%w: %w", ErrModuleProxy, err)
	}
	pkg := r.pkg
	if pkg == "" {
		pkg = "."
	}
	tmp := bin + ".tmp"
	if _, err := goCmd("build", "-trimpath", "-ldflags", r.ldflags, "-o", tmp, pkg); err != nil {
		return err
	}
	if err := os.Rename(tmp, bin); err != nil {
		return fmt.Errorf("install %s: %w", bin, err)
	}
	return nil
}
