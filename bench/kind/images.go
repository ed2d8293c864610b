package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/nodenet/nodenet/daemonset/image"
	"github.com/nodenet/nodenet/internal/atomicfile"
)

// oneBinaryImage writes an image archive holding one static binary at
// /usr/local/bin/<name> (where the upstream images keep it, so kubeadm's
// static pod commands find it on PATH), plus /tmp and /etc.
func oneBinaryImage(ref, binary, out string, entrypoint []string) error {
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	l := image.NewLayer()
	p := "usr/local/bin/" + filepath.Base(binary)
	if len(entrypoint) > 0 && !strings.HasPrefix(entrypoint[0], "/usr/local/bin/") {
		p = strings.TrimPrefix(entrypoint[0], "/")
	}
	if err := l.Add(image.Entry{Path: p, Mode: 0o755, Data: data}); err != nil {
		return err
	}
	if err := addDirs(l); err != nil {
		return err
	}
	return writeImage(out, image.Image{
		Ref: ref, Architecture: runtime.GOARCH, Layers: []*image.Layer{l},
		LayerComments: []string{filepath.Base(binary) + " (static, built from the Go module proxy)"},
		Config: image.Config{Entrypoint: entrypoint, WorkingDir: "/",
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
	})
}

func addDirs(l *image.Layer) error {
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{"tmp", 0o777 | os.ModeSticky}, {"etc", 0o755}, {"var/run", 0o755}} {
		if err := l.Add(image.Entry{Path: d.path, Mode: d.mode, Dir: true}); err != nil {
			return err
		}
	}
	return nil
}

func writeImage(out string, img image.Image) error {
	var buf bytes.Buffer
	if _, err := image.Write(&buf, img); err != nil {
		return fmt.Errorf("image %s: %w", img.Ref, err)
	}
	return atomicfile.Write(out, buf.Bytes(), 0o644)
}

// benchPackages are the bench image's Debian packages: netperf is in
// non-free, iperf3 in main.
var benchPackages = []string{"netperf", "iperf3"}

const benchImageRef = "nodenet/kind-bench:netperf-2.7"

// debImage writes an image of Debian packages only (and their Depends),
// fetched with apt-get download through an apt configuration of its own
// (see aptConfig) and unpacked with dpkg-deb, as nodenet's image is.
func debImage(ctx context.Context, p *progress, apt aptConfig, ref string, pkgs []string, out string) error {
	env := apt.env()
	restore := setEnv(env)
	defer restore()
	resolved, err := image.ResolveDebs(ctx, pkgs)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", strings.Join(pkgs, " "), err)
	}
	debs, err := image.FetchDebs(ctx, resolved, apt.debs, slog.New(slog.NewTextHandler(p.w, nil)))
	if err != nil {
		return err
	}
	l := image.NewLayer()
	for _, d := range debs {
		if err := image.AddDeb(ctx, l, d); err != nil {
			return err
		}
	}
	if err := addDirs(l); err != nil {
		return err
	}
	var names []string
	for _, r := range resolved {
		names = append(names, r.Name+"="+r.Version)
	}
	p.note("%s: %s", ref, strings.Join(names, " "))
	return writeImage(out, image.Image{
		Ref: ref, Architecture: runtime.GOARCH, Layers: []*image.Layer{l},
		LayerComments: []string{"Debian: " + strings.Join(names, " ")},
		Config: image.Config{WorkingDir: "/",
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
	})
}

// setEnv sets variables for the apt tools daemonset/image runs (they
// inherit this process's environment) and returns the undo.
func setEnv(env map[string]string) func() {
	old := map[string]*string{}
	for k, v := range env {
		if o, ok := os.LookupEnv(k); ok {
			old[k] = &o
		} else {
			old[k] = nil
		}
		os.Setenv(k, v)
	}
	return func() {
		for k, o := range old {
			if o == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *o)
			}
		}
	}
}
