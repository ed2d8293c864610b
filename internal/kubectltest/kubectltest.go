package kubectltest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

// Version returns the path of kubectl 1.<minor> ("1.33"), gating the test on
// it.
func Version(t testing.TB, version string) string {
	t.Helper()
	p, err := find(os.Getenv("PATH"), version)
	nettest.Require(t, err)
	return p
}

// Versions returns the paths of several client versions, keyed by version.
func Versions(t testing.TB, versions ...string) map[string]string {
	t.Helper()
	out := make(map[string]string, len(versions))
	for _, v := range versions {
		out[v] = Version(t, v)
	}
	return out
}

// All returns every kubectl.1.NN found, keyed by version ("1.27"); it gates
// the test on there being at least one.
func All(t testing.TB) map[string]string {
	t.Helper()
	all := findAll(os.Getenv("PATH"))
	if len(all) == 0 {
		nettest.Require(t, fmt.Errorf("no kubectl.1.NN client found in %s", strings.Join(searchDirs(os.Getenv("PATH")), ", ")))
	}
	return all
}

// searchDirs are the PATH directories, then the directory of every kubectl
// on PATH after following its symlinks, without repeats.
func searchDirs(path string) []string {
	var dirs, beside []string
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		dirs = append(dirs, d)
		if target, err := filepath.EvalSymlinks(filepath.Join(d, "kubectl")); err == nil {
			beside = append(beside, filepath.Dir(target))
		}
	}
	out := make([]string, 0, len(dirs)+len(beside))
	for _, d := range append(dirs, beside...) {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// find looks for kubectl.<version> in searchDirs(path).
func find(path, version string) (string, error) {
	if !strings.HasPrefix(version, "1.") {
		return "", fmt.Errorf("kubectl version %q: want 1.NN", version)
	}
	dirs := searchDirs(path)
	name := "kubectl." + version
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	if len(dirs) == 0 {
		return "", errors.New("kubectl " + version + " not found: PATH is empty")
	}
	return "", fmt.Errorf("kubectl %s not found: no executable %s in %s", version, name, strings.Join(dirs, ", "))
}

// findAll returns every executable kubectl.1.NN in searchDirs(path), the
// first found of each version.
func findAll(path string) map[string]string {
	out := map[string]string{}
	for _, d := range searchDirs(path) {
		matches, _ := filepath.Glob(filepath.Join(d, "kubectl.1.*"))
		for _, p := range matches {
			v := strings.TrimPrefix(filepath.Base(p), "kubectl.")
			if _, seen := out[v]; !seen && isExecutable(p) {
				out[v] = p
			}
		}
	}
	return out
}
