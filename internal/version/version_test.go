package version

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// TestKubernetesMatchesGoMod: the reported Kubernetes version is that of the
// k8s.io/api module in go.mod (v0.X.Y is Kubernetes v1.X.Y).
func TestKubernetesMatchesGoMod(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/api v0\.(\d+)\.(\d+)\s*$`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatal("go.mod has no k8s.io/api v0.X.Y requirement")
	}
	if want := "v1." + m[1] + "." + m[2]; Kubernetes != want {
		t.Errorf("Kubernetes = %s, but go.mod builds with k8s.io/api v0.%s.%s: want %s", Kubernetes, m[1], m[2], want)
	}
}

// TestGitVersionParsesAsTheRelease: Kubernetes' own version parser (used by
// controllers comparing kubelet versions) reads GitVersion as the release
// itself, not as a pre-release of it.
func TestGitVersionParsesAsTheRelease(t *testing.T) {
	v, err := utilversion.ParseSemantic(GitVersion)
	if err != nil {
		t.Fatal(err)
	}
	rel := utilversion.MustParseSemantic(Kubernetes)
	if v.PreRelease() != "" || v.LessThan(rel) || rel.LessThan(v) {
		t.Errorf("%s parses as %v, want the release %v", GitVersion, v, rel)
	}
	info := Info()
	if info.GitVersion != GitVersion || !strings.HasPrefix(Kubernetes, "v"+info.Major+"."+info.Minor+".") {
		t.Errorf("Info() = %+v, inconsistent with %s", info, Kubernetes)
	}
}
