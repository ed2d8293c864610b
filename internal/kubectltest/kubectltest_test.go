package kubectltest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// layout makes the image's arrangement in a temp dir: bin/kubectl a symlink
// to sdk/kubectl, with versioned clients beside the target, and returns the
// PATH to use.
func layout(t *testing.T) (path, sdk string) {
	t.Helper()
	root := t.TempDir()
	bin, sdk := filepath.Join(root, "bin"), filepath.Join(root, "sdk")
	for _, d := range []string{bin, sdk} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, mode := range map[string]os.FileMode{"kubectl": 0o755, "kubectl.1.27": 0o755, "kubectl.1.33": 0o755, "kubectl.1.30": 0o644} {
		if err := os.WriteFile(filepath.Join(sdk, name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(sdk, "kubectl"), filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "empty") + string(os.PathListSeparator) + bin, sdk
}

func TestFindBesideTheKubectlOnPATH(t *testing.T) {
	path, sdk := layout(t)
	got, err := find(path, "1.33")
	if err != nil || got != filepath.Join(sdk, "kubectl.1.33") {
		t.Fatalf("find 1.33 = %q, %v", got, err)
	}
	// Not executable, absent, malformed: an error that names what was
	// looked for and where.
	for _, v := range []string{"1.30", "1.99"} {
		_, err := find(path, v)
		if err == nil || !strings.Contains(err.Error(), "kubectl."+v) || !strings.Contains(err.Error(), sdk) {
			t.Errorf("find %s: %v, want an error naming kubectl.%s and %s", v, err, v, sdk)
		}
	}
	if _, err := find(path, "33"); err == nil {
		t.Error(`find "33" succeeded`)
	}
	if _, err := find("", "1.33"); err == nil || !strings.Contains(err.Error(), "PATH is empty") {
		t.Errorf("empty PATH: %v", err)
	}
}

func TestFindOnPATHItself(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubectl.1.31"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := find(dir, "1.31"); err != nil || got != filepath.Join(dir, "kubectl.1.31") {
		t.Fatalf("find = %q, %v", got, err)
	}
}

func TestFindAll(t *testing.T) {
	path, sdk := layout(t)
	got := findAll(path)
	if len(got) != 2 || got["1.27"] != filepath.Join(sdk, "kubectl.1.27") || got["1.33"] != filepath.Join(sdk, "kubectl.1.33") {
		t.Fatalf("findAll = %v, want the executable 1.27 and 1.33", got)
	}
	if got := findAll(t.TempDir()); len(got) != 0 {
		t.Fatalf("findAll in an empty dir = %v", got)
	}
}
