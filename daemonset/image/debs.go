package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// DebPackage is one Debian package at the exact version apt would install.
type DebPackage struct {
	Name, Version, Arch string
	SHA256              string // of the .deb, from the archive's index
}

// File is the .deb's name as the archive and apt-get download give it.
func (p DebPackage) File() string {
	return fmt.Sprintf("%s_%s_%s.deb", p.Name, strings.ReplaceAll(p.Version, ":", "%3a"), p.Arch)
}

// ResolveDebs returns roots and everything they depend on (Depends and
// Pre-Depends, recursively; not Recommends), each at apt's candidate
// version, sorted by name. apt's own view decides, so the image carries
// exactly the versions this machine's Debian release would install.
func ResolveDebs(ctx context.Context, roots []string) ([]DebPackage, error) {
	args := append([]string{"depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
		"--no-breaks", "--no-replaces", "--no-enhances"}, roots...)
	out, err := runTool(ctx, "apt-cache", args...)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		// Top-level lines are packages; "<name>" is a virtual package,
		// which some real one in the list provides.
		if line == "" || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "<") {
			continue
		}
		names[strings.TrimSpace(line)] = true
	}
	for _, r := range roots {
		if !names[r] {
			return nil, fmt.Errorf("apt-cache knows no package %q (run apt-get update?)", r)
		}
	}
	var pkgs []DebPackage
	for n := range names {
		p, err := candidate(ctx, n)
		if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return pkgs, nil
}

// candidate reads the version apt would install and its .deb's checksum.
func candidate(ctx context.Context, name string) (DebPackage, error) {
	out, err := runTool(ctx, "apt-cache", "show", "--no-all-versions", name)
	if err != nil {
		return DebPackage{}, err
	}
	p := DebPackage{Name: name}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		switch k {
		case "Version":
			p.Version = v
		case "Architecture":
			p.Arch = v
		case "SHA256":
			p.SHA256 = v
		}
	}
	if p.Version == "" || p.Arch == "" || p.SHA256 == "" {
		return DebPackage{}, fmt.Errorf("apt-cache show %s: no Version, Architecture or SHA256 field", name)
	}
	return p, nil
}

// FetchDebs makes sure cacheDir holds each package's .deb with the
// checksum the archive index gives (apt-get download otherwise) and
// returns their paths.
func FetchDebs(ctx context.Context, pkgs []DebPackage, cacheDir string, log *slog.Logger) ([]string, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("deb cache: %w", err)
	}
	var paths, missing []string
	for _, p := range pkgs {
		path := filepath.Join(cacheDir, p.File())
		paths = append(paths, path)
		if sumOK(path, p.SHA256) {
			continue
		}
		missing = append(missing, p.Name+"="+p.Version)
	}
	if len(missing) > 0 {
		log.Info("downloading Debian packages", "count", len(missing), "dir", cacheDir)
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"download", "-q"}, missing...)...)
		cmd.Dir = cacheDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("apt-get download %s: %w: %s", strings.Join(missing, " "), err, bytes.TrimSpace(out))
		}
	}
	for i, p := range pkgs {
		if !sumOK(paths[i], p.SHA256) {
			return nil, fmt.Errorf("%s: missing or not the archive's %s %s after apt-get download", paths[i], p.Name, p.Version)
		}
	}
	return paths, nil
}

func sumOK(path, want string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]) == want
}

// skipDebPath is what the image leaves out of a package: documentation,
// manuals, translations and packaging metadata. Nothing here is read at
// run time.
func skipDebPath(p string) bool {
	for _, prefix := range []string{"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
		"usr/share/lintian", "usr/share/bug", "usr/share/doc-base", "usr/share/bash-completion"} {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return true
		}
	}
	return false
}

// AddDeb extracts the .deb at path into l (dpkg-deb --fsys-tarfile gives
// the data archive as one tar stream, whatever it is compressed with).
func AddDeb(ctx context.Context, l *Layer, path string) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", path, err)
	}
	addErr := addTar(l, stdout)
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", path, err, bytes.TrimSpace(stderr.Bytes()))
	}
	if addErr != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), addErr)
	}
	return nil
}

func addTar(l *Layer, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read package data: %w", err)
		}
		p := strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")
		p = strings.TrimSuffix(p, "/")
		if p == "" || p == "." || skipDebPath(p) {
			continue
		}
		mode := fs.FileMode(h.Mode).Perm()
		if h.Mode&0o4000 != 0 {
			mode |= fs.ModeSetuid
		}
		if h.Mode&0o2000 != 0 {
			mode |= fs.ModeSetgid
		}
		if h.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		e := Entry{Path: p, Mode: mode}
		switch h.Typeflag {
		case tar.TypeDir:
			e.Dir = true
		case tar.TypeSymlink:
			e.Link = h.Linkname
		case tar.TypeLink:
			e.HardLink = strings.TrimPrefix(h.Linkname, "./")
		case tar.TypeReg:
			if e.Data, err = io.ReadAll(tr); err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			if e.Data == nil {
				e.Data = []byte{}
			}
		default:
			return fmt.Errorf("%s: unsupported tar entry type %q", p, h.Typeflag)
		}
		if err := l.Add(e); err != nil {
			return err
		}
	}
}

func runTool(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
