package vmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// MetaPackage is the Debian package whose dependency names the kernel
// image to boot.
const MetaPackage = "linux-image-amd64"

// Kernel is an unpacked Debian kernel package in the cache.
type Kernel struct {
	// Package is the versioned package name (linux-image-6.1.0-57-amd64).
	Package string
	// Release is the module directory name (6.1.0-57-amd64).
	Release string
	// Dir is the cache directory of this package.
	Dir string
}

// Root is where the package is unpacked.
func (k *Kernel) Root() string { return filepath.Join(k.Dir, "pkg") }

// Vmlinux is the uncompressed kernel image qemu boots.
func (k *Kernel) Vmlinux() string { return filepath.Join(k.Dir, "vmlinux") }

// ModulesDir is the unpacked /lib/modules/<release>.
func (k *Kernel) ModulesDir() string {
	return filepath.Join(k.Root(), "lib", "modules", k.Release)
}

// CacheDir is $XDG_CACHE_HOME/nodenet/vmtest (~/.cache/... by default):
// outside the repository, kept between runs.
func CacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("vmtest cache directory: %w", err)
	}
	return filepath.Join(d, "nodenet", "vmtest"), nil
}

var dependsRe = regexp.MustCompile(`(?m)^\s*Depends:\s*(linux-image-(\d[^\s]*))\s*$`)

// parseDepends finds the versioned image package in `apt-cache depends
// linux-image-amd64` output.
func parseDepends(out []byte) (pkg, release string, err error) {
	m := dependsRe.FindSubmatch(out)
	if m == nil {
		return "", "", fmt.Errorf("no linux-image-<version> dependency in `apt-cache depends %s` output:\n%s", MetaPackage, out)
	}
	return string(m[1]), string(m[2]), nil
}

// FetchKernel resolves, downloads (apt-get download, never installing
// it) and unpacks the kernel package into the cache, and extracts the
// uncompressed vmlinux; whatever is already in the cache is reused.
func FetchKernel(ctx context.Context) (*Kernel, error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", MetaPackage).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("apt-cache depends %s: %w\n%s", MetaPackage, err, out)
	}
	pkg, release, err := parseDepends(out)
	if err != nil {
		return nil, err
	}
	k := &Kernel{Package: pkg, Release: release, Dir: filepath.Join(cache, pkg)}
	if _, err := os.Stat(k.Vmlinux()); err == nil {
		return k, nil
	}
	if err := os.MkdirAll(k.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("vmtest cache: %w", err)
	}
	dl, err := os.MkdirTemp(k.Dir, "download-")
	if err != nil {
		return nil, fmt.Errorf("vmtest cache: %w", err)
	}
	defer os.RemoveAll(dl)
	cmd := exec.CommandContext(ctx, "apt-get", "download", pkg)
	cmd.Dir = dl
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("apt-get download %s: %w\n%s", pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dl, pkg+"_*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download %s: expected one .deb in %s, found %d", pkg, dl, len(debs))
	}
	unpacked := filepath.Join(dl, "pkg")
	if out, err := exec.CommandContext(ctx, "dpkg", "-x", debs[0], unpacked).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg -x %s: %w\n%s", debs[0], err, out)
	}
	os.RemoveAll(k.Root())
	if err := os.Rename(unpacked, k.Root()); err != nil {
		return nil, fmt.Errorf("vmtest cache: %w", err)
	}
	vmlinuz := filepath.Join(k.Root(), "boot", "vmlinuz-"+release)
	if err := extractVmlinux(ctx, vmlinuz, k.Vmlinux()); err != nil {
		return nil, err
	}
	return k, nil
}

// xzMagic starts the XZ stream a Debian bzImage carries its kernel in.
var xzMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0}

// extractVmlinux decompresses the ELF kernel out of a bzImage: qemu boots
// an ELF vmlinux through its PVH note, without running the decompressor
// (seconds under TCG).
func extractVmlinux(ctx context.Context, vmlinuz, dst string) error {
	img, err := os.ReadFile(vmlinuz)
	if err != nil {
		return fmt.Errorf("read kernel image: %w", err)
	}
	off := bytes.Index(img, xzMagic)
	if off < 0 {
		return fmt.Errorf("%s: no XZ payload (only XZ-compressed bzImages are supported)", vmlinuz)
	}
	cmd := exec.CommandContext(ctx, "xz", "-dc")
	cmd.Stdin = bytes.NewReader(img[off:])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	elf, err := cmd.Output()
	// The payload is followed by the bzImage's trailer, which xz reports
	// as garbage after a complete stream; what matters is an ELF kernel.
	if len(elf) < 4 || !bytes.Equal(elf[:4], []byte("\x7fELF")) {
		return fmt.Errorf("decompress %s: no ELF kernel (%v): %s", vmlinuz, err, strings.TrimSpace(stderr.String()))
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, elf, 0o644); err != nil {
		return fmt.Errorf("write vmlinux: %w", err)
	}
	return errors.Join(os.Rename(tmp, dst))
}
