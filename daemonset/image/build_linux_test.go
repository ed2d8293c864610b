package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/internal/version"
)

// TestBuildImage builds the real image twice (the same digest both times:
// reproducible), unpacks it and runs its userland and binaries chrooted
// inside a throwaway network namespace: the image's nft and both iptables
// backends program that namespace's firewall, as the daemons will. With a
// Docker daemon at hand, `docker load` must accept the archive and run it.
func TestBuildImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image (Go builds and Debian packages): not with -short")
	}
	nettest.RequirePrivileged(t)
	for _, tool := range []string{"apt-cache", "apt-get", "dpkg-deb", "go"} {
		nettest.RequireTool(t, tool)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ref := "nodenet/nodenet-test:" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	build := func(out string) Built {
		start := time.Now()
		b, err := Build(ctx, BuildOptions{RepoDir: repo, Out: out, Ref: ref, CacheDir: filepath.Join(cache, "nodenet", "debs"), Log: testapi.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("built %s in %v: digest %s, %.1f MB compressed, %d Debian packages", out, time.Since(start).Round(time.Second), b.Digest, float64(b.Size)/1e6, len(b.Packages))
		return b
	}
	first := build(filepath.Join(dir, "a.tar"))
	second := build(filepath.Join(dir, "b.tar"))
	if first.Digest != second.Digest {
		t.Fatalf("not reproducible: %s then %s", first.Digest, second.Digest)
	}
	for _, want := range []string{"iptables", "nftables", "libc6", "libnftnl11", "libxtables12"} {
		if !hasPackage(first.Packages, want) {
			t.Errorf("Debian packages %v lack %s", first.Packages, want)
		}
	}

	root := filepath.Join(dir, "rootfs")
	unpack(t, filepath.Join(dir, "a.tar"), root)
	for _, gone := range []string{"usr/share/doc", "usr/share/man"} {
		if _, err := os.Stat(filepath.Join(root, gone)); err == nil {
			t.Errorf("image carries %s", gone)
		}
	}
	ns := nettest.New(t)
	run := func(args ...string) string {
		t.Helper()
		out, err := ns.Exec(ctx, "chroot", append([]string{root}, args...)...)
		if err != nil {
			t.Fatalf("chroot image %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run(NodenetPath, "version"); !strings.Contains(out, version.GitVersion) {
		t.Errorf("nodenet version: %q", out)
	}
	run("nft", "add table ip nodenet-image-test")
	if out := ns.MustExec(t, "nft", "list", "tables"); !strings.Contains(string(out), "nodenet-image-test") {
		t.Errorf("the image's nft did not program the namespace: host nft sees %q", out)
	}
	run("iptables-legacy", "-w", "-t", "nat", "-N", "NODENET-LEGACY")
	run("iptables-nft", "-w", "-t", "nat", "-N", "NODENET-NFT")
	run("ip6tables-legacy-save", "-t", "nat")
	if out := run("iptables-legacy-save", "-t", "nat"); !strings.Contains(out, ":NODENET-LEGACY") {
		t.Errorf("iptables-legacy-save in the image: %q", out)
	}
	if out := run("iptables", "-w", "-t", "nat", "-S"); !strings.Contains(out, "-N NODENET-NFT") {
		t.Errorf("plain iptables is not the nft backend: %q", out)
	}
	dockerLoad(t, ctx, filepath.Join(dir, "a.tar"), ref, first)
}

func hasPackage(pkgs []DebPackage, name string) bool {
	for _, p := range pkgs {
		if p.Name == name {
			return true
		}
	}
	return false
}

// unpack applies the image's layers, in order, under root.
func unpack(t *testing.T, archive, root string) {
	t.Helper()
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, b)
	var dm []dockerManifest
	if err := json.Unmarshal(files["manifest.json"], &dm); err != nil {
		t.Fatal(err)
	}
	for _, lp := range dm[0].Layers {
		zr, err := gzip.NewReader(bytes.NewReader(files[lp]))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, h.Name)
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(p, os.FileMode(h.Mode).Perm())
			case tar.TypeSymlink:
				err = os.Symlink(h.Linkname, p)
			case tar.TypeLink:
				err = os.Link(filepath.Join(root, h.Linkname), p)
			case tar.TypeReg:
				var data []byte
				if data, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, data, os.FileMode(h.Mode).Perm())
				}
			default:
				err = fmt.Errorf("type %q", h.Typeflag)
			}
			if err != nil {
				t.Fatalf("unpack %s: %v", h.Name, err)
			}
		}
	}
}

// dockerLoad loads the archive into a Docker daemon if there is one, runs
// `nodenet version` from it and removes it again.
func dockerLoad(t *testing.T, ctx context.Context, archive, ref string, b Built) {
	if _, err := exec.LookPath("docker"); err != nil {
		t.Log("no docker CLI: docker load not tried")
		return
	}
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Logf("no Docker daemon (%v: %s): docker load not tried", err, bytes.TrimSpace(out))
		return
	}
	docker := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", ref).Run() })
	if out := docker("load", "-i", archive); !strings.Contains(out, ref) {
		t.Fatalf("docker load: %q, want it to name %s", out, ref)
	}
	if id := docker("image", "inspect", "--format", "{{.Id}}", ref); id != b.ConfigDigest {
		t.Errorf("docker image ID %s, built %s", id, b.ConfigDigest)
	}
	if out := docker("run", "--rm", "--network", "none", ref, "version"); !strings.Contains(out, version.GitVersion) {
		t.Errorf("docker run %s version: %q", ref, out)
	}
}
