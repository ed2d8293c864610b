package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nodenet/nodenet/internal/upstream"
)

// Versions of everything built from the Go module proxy.
const (
	kubernetesVersion = upstream.KubernetesVersion // v1.37.2
	kindVersion       = "v0.33.0"
	etcdVersion       = "v3.7.3"
	crictlVersion     = "v1.37.0"
)

// goRecipe builds main packages of one module version in a scratch module
// in the cache (sources stay in the module cache; nothing is copied into
// the repository). Binaries are static: they run in the node image and,
// alone, in one-binary component images.
type goRecipe struct {
	name    string            // cache directory name
	module  string            // module@version the scratch module requires
	bins    map[string]string // binary name → main package
	ldflags string
	// gomod writes the scratch go.mod given the downloaded module's
	// directory; nil is a plain require.
	gomod func(moduleDir string) ([]byte, error)
}

func kubernetesRecipe() goRecipe {
	bins := map[string]string{}
	for _, c := range []string{"kubeadm", "kubelet", "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		bins[c] = "k8s.io/kubernetes/cmd/" + c
	}
	return goRecipe{
		name: "kubernetes", module: "k8s.io/kubernetes@" + kubernetesVersion, bins: bins,
		ldflags: upstream.KubernetesLdflags(),
		gomod: func(dir string) ([]byte, error) {
			return upstream.KubernetesGoMod(filepath.Join(dir, "go.mod"))
		},
	}
}

func etcdRecipe() goRecipe {
	return goRecipe{name: "etcd", module: "go.etcd.io/etcd/server/v3@" + etcdVersion,
		bins: map[string]string{"etcd": "go.etcd.io/etcd/server/v3"}}
}

func crictlRecipe() goRecipe {
	return goRecipe{name: "crictl", module: "sigs.k8s.io/cri-tools@" + crictlVersion,
		bins:    map[string]string{"crictl": "sigs.k8s.io/cri-tools/cmd/crictl"},
		ldflags: "-X sigs.k8s.io/cri-tools/pkg/version.Version=" + crictlVersion}
}

func kindRecipe() goRecipe {
	return goRecipe{name: "kind", module: "sigs.k8s.io/kind@" + kindVersion,
		bins: map[string]string{"kind": "sigs.k8s.io/kind"}}
}

func (r goRecipe) key() string {
	in := goInputs(map[string]string{"module": r.module, "ldflags": r.ldflags})
	for b, p := range r.bins {
		in["bin "+b] = p
	}
	return key(in)
}

func (r goRecipe) binNames() []string {
	names := make([]string, 0, len(r.bins))
	for b := range r.bins {
		names = append(names, b)
	}
	sort.Strings(names)
	return names
}

// goEnv is the environment of every scratch-module go command: module mode
// without a workspace, the local toolchain, no cgo.
func goEnv() []string {
	return append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
}

// buildGo returns the directory holding r's binaries, building them first
// unless the cache has them.
func buildGo(ctx context.Context, p *progress, c cache, r goRecipe) (string, error) {
	k := r.key()
	dir := c.dir("go-"+r.name, k)
	bin := filepath.Join(dir, "bin")
	if c.complete("go-"+r.name, k) {
		p.note("%s: cached in %s", r.name, dir)
		return bin, nil
	}
	err := p.step(ctx, "build "+r.module+" ("+strings.Join(r.binNames(), ", ")+")", func(ctx context.Context) error {
		if err := os.MkdirAll(bin, 0o755); err != nil {
			return err
		}
		run := func(args ...string) ([]byte, error) {
			// nice: a cold Kubernetes build takes both cores for half an
			// hour; other work on the machine stays responsive.
			cmd := exec.CommandContext(ctx, "nice", append([]string{"-n", "19", "go"}, args...)...)
			cmd.Dir, cmd.Env = dir, goEnv()
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.Bytes())
			}
			return out.Bytes(), nil
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module nodenet.local/kind/download\n\ngo 1.26\n"), 0o644); err != nil {
			return err
		}
		out, err := run("mod", "download", "-json", r.module)
		if err != nil {
			return err
		}
		var dl struct{ Dir string }
		if err := json.Unmarshal(out, &dl); err != nil || dl.Dir == "" {
			return fmt.Errorf("go mod download %s: no directory in %s", r.module, out)
		}
		gomod := []byte(fmt.Sprintf("module nodenet.local/kind/%s\n\ngo 1.26\n\nrequire %s\n", r.name, strings.Replace(r.module, "@", " ", 1)))
		if r.gomod != nil {
			if gomod, err = r.gomod(dl.Dir); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), gomod, 0o644); err != nil {
			return err
		}
		var tools strings.Builder
		tools.WriteString("//go:build tools\n\npackage tools\n\nimport (\n")
		for _, b := range r.binNames() {
			fmt.Fprintf(&tools, "\t_ %q\n", r.bins[b])
		}
		tools.WriteString(")\n")
		if err := os.WriteFile(filepath.Join(dir, "tools.go"), []byte(tools.String()), 0o644); err != nil {
			return err
		}
		if _, err := run("mod", "tidy"); err != nil {
			return err
		}
		for _, b := range r.binNames() {
			p.note("go build %s", r.bins[b])
			if _, err := run("build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w "+r.ldflags), "-o", filepath.Join(bin, b), r.bins[b]); err != nil {
				return err
			}
		}
		return c.markComplete("go-"+r.name, k)
	})
	return bin, err
}

// buildPause builds this directory's pause program, the pod sandbox's
// only process.
func buildPause(ctx context.Context, repo, out string) error {
	return goBuildRepo(ctx, repo, "./bench/kind/pause", out)
}

// goBuildRepo builds a main package of the nodenet repository as a
// static binary (it runs in images without a libc).
func goBuildRepo(ctx context.Context, repo, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return nil
}
