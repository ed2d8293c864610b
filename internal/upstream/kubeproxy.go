package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
)

// KubernetesVersion is the upstream Kubernetes release whose binaries the
// interoperability tests run; its staging modules are tagged v0.<minor>.<patch>.
const (
	KubernetesVersion = "v1.37.2"
	stagingVersion    = "v0.37.2"
)

// EnvBuild asks the helpers to build an upstream binary that is not cached.
// Without it a missing Kubernetes binary skips the test: a cold build takes
// 20–40 minutes on 2 cores, too long to start by surprise in a test run.
const EnvBuild = "NODENET_UPSTREAM_BUILD"

// BuildCommand is what a developer runs once to build (and cache) every
// upstream binary the tests use.
const BuildCommand = "`make upstream` (or `" + EnvBuild + "=1 go test -run TestBuildUpstream -timeout 60m ./internal/upstream`)"

const kubernetesModule = "k8s.io/kubernetes"

// KubeProxy returns the path of an upstream kube-proxy binary. A cached
// build is used as is; a missing one is built only when NODENET_UPSTREAM_BUILD=1
// and otherwise skips the test, naming the command that builds it.
func KubeProxy(t testing.TB) string {
	t.Helper()
	return kubernetesBinary(t, "kube-proxy", os.Getenv(EnvBuild) == "1")
}

func kubernetesBinary(t testing.TB, name string, mayBuild bool) string {
	t.Helper()
	r := kubernetesRecipe(name)
	dir, err := cacheDir(name + "-" + KubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !built(dir, r) && !mayBuild {
		// A plain skip, also under NODENET_PRIVILEGED: a missing cache is a
		// choice about build time, not a missing privilege.
		t.Skipf("upstream %s %s is not built in %s; build it once with: %s", name, KubernetesVersion, dir, BuildCommand)
	}
	bin, err := build(t.Logf, dir, r)
	if errors.Is(err, ErrModuleProxy) {
		nettest.Require(t, fmt.Errorf("build upstream %s %s: %w", name, KubernetesVersion, err))
	}
	if err != nil {
		t.Fatalf("build upstream %s %s: %v", name, KubernetesVersion, err)
	}
	return bin
}

// kubernetesRecipe builds k8s.io/kubernetes/cmd/<name>. k8s.io/kubernetes
// requires its staging modules (k8s.io/api, client-go, …) at v0.0.0 and
// replaces them with its own staging directory, which a dependent module
// does not see; the scratch module replaces each with its published tag.
// The -X flags set the version the binary reports (and sends as its user
// agent) instead of v0.0.0.
func kubernetesRecipe(name string) recipe {
	pkg := kubernetesModule + "/cmd/" + name
	return recipe{
		name:   name,
		module: kubernetesModule + "@" + KubernetesVersion,
		pkg:    pkg,
		generate: func(dir, moduleDir string) error {
			gomod, err := kubernetesGoMod(filepath.Join(moduleDir, "go.mod"))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "go.mod"), gomod, 0o644); err != nil {
				return fmt.Errorf("write go.mod: %w", err)
			}
			// The tag keeps the file out of builds while go mod tidy still
			// sees the import and records what the command needs.
			tools := fmt.Sprintf("//go:build tools\n\npackage tools\n\nimport _ %q\n", pkg)
			return os.WriteFile(filepath.Join(dir, "tools.go"), []byte(tools), 0o644)
		},
		ldflags: KubernetesLdflags(),
	}
}

// KubernetesLdflags are the -X flags that make a binary built from
// k8s.io/kubernetes report KubernetesVersion (bench/kind builds every
// Kubernetes binary with them).
func KubernetesLdflags() string {
	var ld []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		ld = append(ld, "-X "+pkg+".gitVersion="+KubernetesVersion, "-X "+pkg+".gitMajor=1", "-X "+pkg+".gitMinor=37")
	}
	return strings.Join(ld, " ")
}

// KubernetesGoMod is the go.mod of a scratch module that builds commands
// of k8s.io/kubernetes, given k8s.io/kubernetes's own go.mod (see
// kubernetesRecipe for why the replaces).
func KubernetesGoMod(upstreamGoMod string) ([]byte, error) { return kubernetesGoMod(upstreamGoMod) }

// kubernetesGoMod is the scratch module's go.mod, given k8s.io/kubernetes's.
func kubernetesGoMod(upstreamGoMod string) ([]byte, error) {
	f, err := os.Open(upstreamGoMod)
	if err != nil {
		return nil, fmt.Errorf("read %s's go.mod: %w", kubernetesModule, err)
	}
	defer f.Close()
	staging, err := stagingModules(f)
	if err != nil {
		return nil, fmt.Errorf("read %s's go.mod: %w", kubernetesModule, err)
	}
	if len(staging) == 0 {
		return nil, fmt.Errorf("read %s's go.mod: no staging modules (k8s.io/... v0.0.0)", kubernetesModule)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "module nodenet.local/upstream/kubernetes\n\ngo 1.26\n\nrequire %s %s\n\n", kubernetesModule, KubernetesVersion)
	for _, m := range staging {
		fmt.Fprintf(&b, "replace %s => %s %s\n", m, m, stagingVersion)
	}
	return b.Bytes(), nil
}

// stagingModules lists the k8s.io modules a go.mod requires at exactly
// v0.0.0 (k8s.io/utils and kube-openapi are required at pseudo-versions
// v0.0.0-<date>-<hash>: real versions, not staging).
func stagingModules(r io.Reader) ([]string, error) {
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "//")
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(fields) == 2 && strings.HasPrefix(fields[0], "k8s.io/") && fields[1] == "v0.0.0" {
			seen[fields[0]] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	mods := make([]string, 0, len(seen))
	for m := range seen {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	return mods, nil
}
