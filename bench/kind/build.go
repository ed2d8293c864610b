package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// built is what a cluster is made from.
type built struct {
	kind, kubectl string // host binaries
	nodeImage     string // docker image ref
	benchImage    string // image archive (netperf, iperf3)
	kubernetes    string // dir of the Kubernetes binaries
}

// componentFor maps an image kubeadm asks for to the binary that makes it;
// "" for images this cluster does without (CoreDNS: the DNS addon is
// skipped, nothing here resolves names).
func componentFor(ref string) string {
	name, _, _ := strings.Cut(path.Base(ref), ":")
	switch name {
	case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "etcd", "pause":
		return name
	}
	return ""
}

// buildAll builds or finds in the cache everything a cluster needs.
func buildAll(ctx context.Context, p *progress, c cache, repo string) (built, error) {
	var b built
	d := docker{bin: "docker"}
	recipes := []goRecipe{kindRecipe(), crictlRecipe(), etcdRecipe(), kubernetesRecipe()}
	dirs := map[string]string{}
	var goKeys []string
	for _, r := range recipes {
		dir, err := buildGo(ctx, p, c, r)
		if err != nil {
			return b, err
		}
		dirs[r.name] = dir
		goKeys = append(goKeys, r.name+"="+r.key())
	}
	b.kind, b.kubectl, b.kubernetes = filepath.Join(dirs["kind"], "kind"), filepath.Join(dirs["kubernetes"], "kubectl"), dirs["kubernetes"]

	apt, err := newAptConfig(c)
	if err != nil {
		return b, err
	}
	root, err := buildRootfs(ctx, p, c, apt.mirror)
	if err != nil {
		return b, err
	}

	out, err := exec.CommandContext(ctx, filepath.Join(dirs["kubernetes"], "kubeadm"), "config", "images", "list",
		"--kubernetes-version", kubernetesVersion).Output()
	if err != nil {
		return b, fmt.Errorf("kubeadm config images list: %w", err)
	}
	imagesDir := filepath.Join(c.root, "images-"+key(map[string]string{"go": strings.Join(goKeys, ","), "recipe": "1"}))
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		return b, err
	}
	var comps []componentImage
	var pauseRef string
	err = p.step(ctx, "component images (one binary each)", func(ctx context.Context) error {
		pause := filepath.Join(imagesDir, "pause")
		if err := buildPause(ctx, repo, pause); err != nil {
			return err
		}
		for _, ref := range strings.Fields(string(out)) {
			comp := componentFor(ref)
			if comp == "" {
				p.note("skipped %s (no DNS addon)", ref)
				continue
			}
			bin, entry := filepath.Join(dirs["kubernetes"], comp), []string(nil)
			switch comp {
			case "etcd":
				bin = filepath.Join(dirs["etcd"], "etcd")
			case "pause":
				bin, entry, pauseRef = pause, []string{"/pause"}, ref
			}
			archive := filepath.Join(imagesDir, comp+".tar")
			if err := oneBinaryImage(ref, bin, archive, entry); err != nil {
				return err
			}
			comps = append(comps, componentImage{ref: ref, archive: archive})
			p.note("%s ← %s", ref, bin)
		}
		return nil
	})
	if err != nil {
		return b, err
	}

	kindFiles, err := moduleDir(ctx, "sigs.k8s.io/kind@"+kindVersion)
	if err != nil {
		return b, err
	}
	in := nodeInputs{rootfs: root, kindFiles: filepath.Join(kindFiles, "images", "base", "files"),
		kubernetes: dirs["kubernetes"], crictl: filepath.Join(dirs["crictl"], "crictl"), images: comps}
	b.nodeImage = nodeImageRef(nodeKey(in, goKeys, pauseRef))
	if d.imageExists(ctx, b.nodeImage) {
		p.note("node image: %s (cached)", b.nodeImage)
	} else if err := p.step(ctx, "node image "+b.nodeImage, func(ctx context.Context) error {
		stage, err := os.MkdirTemp(c.root, "stage-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(stage)
		if out, err := exec.CommandContext(ctx, "cp", "-a", root+"/.", stage).CombinedOutput(); err != nil {
			return fmt.Errorf("copy rootfs: %w: %s", err, out)
		}
		if err := stageNode(ctx, stage, in, pauseRef); err != nil {
			return err
		}
		return assembleNode(ctx, p, d, stage, comps, b.nodeImage)
	}); err != nil {
		return b, err
	}

	b.benchImage = filepath.Join(c.root, "bench-image.tar")
	if _, err := os.Stat(b.benchImage); err != nil {
		if err := p.step(ctx, "bench image "+benchImageRef+" (netperf from non-free, iperf3)", func(ctx context.Context) error {
			if err := apt.update(ctx); err != nil {
				return err
			}
			return debImage(ctx, p, apt, benchImageRef, benchPackages, b.benchImage)
		}); err != nil {
			return b, err
		}
	}
	return b, nil
}

// moduleDir is where the module cache holds module@version.
func moduleDir(ctx context.Context, mod string) (string, error) {
	tmp, err := os.MkdirTemp("", "nodenet-kind-mod-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module tmp\n\ngo 1.26\n"), 0o644); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir, cmd.Env = tmp, goEnv()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", mod, err)
	}
	var dl struct{ Dir string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no directory", mod)
	}
	return dl.Dir, nil
}
