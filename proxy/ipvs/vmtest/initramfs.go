package vmtest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// baseVersion names the base initramfs in the cache; bump it when what
// goes into it changes, so stale caches are rebuilt.
const baseVersion = "3"

// moduleDirs are the parts of the module tree the guest gets: netfilter
// (conntrack, nf_tables, xtables, ipset, IPVS) and its dependencies. The
// guest's busybox modprobe loads them, and the kernel autoloads the rest
// (nft expressions, xt matches) through it.
var moduleDirs = []string{
	"kernel/net/netfilter",
	"kernel/net/ipv4/netfilter",
	"kernel/net/ipv6/netfilter",
	"kernel/net/sched",
	"kernel/net/xfrm", // xfrm_user: netlink.NewHandle opens an XFRM socket
	"kernel/drivers/net/veth.ko",
	"kernel/drivers/net/dummy.ko",
	"kernel/lib/libcrc32c.ko",
	"kernel/crypto/crc32c_generic.ko",
}

// tools are the host's binaries copied into the guest's /usr/sbin (with the
// libraries ldd lists), and the names each is also called by.
var tools = map[string][]string{
	"ipvsadm":   nil,
	"ip":        nil,
	"nft":       nil,
	"ipset":     nil,
	"conntrack": nil,
	// The plain names for tests and ipvsadm's users, the -nft ones for
	// internal/iptables, which names its backend.
	"xtables-nft-multi": {"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore",
		"iptables-nft", "iptables-nft-save", "iptables-nft-restore", "ip6tables-nft", "ip6tables-nft-save", "ip6tables-nft-restore"},
}

// xtablesDir holds the iptables extensions, which it dlopens.
const xtablesDir = "/usr/lib/x86_64-linux-gnu/xtables"

// initScript is the guest's /init: mount what a Linux system needs,
// let the kernel autoload modules with busybox modprobe, run the test's
// script and report its exit status on one line, then power off.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t devtmpfs dev /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
echo /bin/modprobe >/proc/sys/kernel/modprobe
ip link set lo up
echo "` + startMarker + `"
cd /vmtest && sh ./run.sh
echo "` + resultMarker + `$?"
poweroff -f
`

const (
	startMarker  = "NODENET-VMTEST-START"
	resultMarker = "NODENET-VMTEST-EXIT="
)

// BaseInitramfs returns the base initramfs for k, building it into the
// cache on first use.
func BaseInitramfs(ctx context.Context, k *Kernel) (string, error) {
	out := filepath.Join(k.Dir, "base-"+baseVersion+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	stage, err := os.MkdirTemp(k.Dir, "stage-")
	if err != nil {
		return "", fmt.Errorf("initramfs staging: %w", err)
	}
	defer os.RemoveAll(stage)
	if err := stageBase(ctx, k, stage); err != nil {
		return "", err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	c := newCPIO(f)
	err = filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == stage {
			return err
		}
		name, _ := filepath.Rel(stage, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			c.Symlink(name, target)
		case d.IsDir():
			c.Dir(name)
		default:
			c.File(name, p)
		}
		return nil
	})
	if err == nil {
		err = c.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write initramfs: %w", err)
	}
	return out, os.Rename(tmp, out)
}

func stageBase(ctx context.Context, k *Kernel, root string) error {
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "run", "tmp", "etc", "vmtest"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("initramfs staging: %w", err)
		}
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("vmtest needs busybox-static: %w", err)
	}
	if err := copyFile(busybox, filepath.Join(root, "bin/busybox"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "init"), []byte(initScript), 0o755); err != nil {
		return fmt.Errorf("initramfs staging: %w", err)
	}
	var binaries []string
	for tool, aliases := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			return fmt.Errorf("vmtest needs %s on the host: %w", tool, err)
		}
		if err := copyFile(p, filepath.Join(root, "usr/sbin", tool), 0o755); err != nil {
			return err
		}
		binaries = append(binaries, p)
		for _, a := range aliases {
			if err := os.Symlink(tool, filepath.Join(root, "usr/sbin", a)); err != nil {
				return fmt.Errorf("initramfs staging: %w", err)
			}
		}
	}
	plugins, _ := filepath.Glob(filepath.Join(xtablesDir, "*.so"))
	for _, p := range plugins {
		if err := copyFile(p, filepath.Join(root, p), 0o755); err != nil {
			return err
		}
	}
	libs, err := sharedLibraries(ctx, append(binaries, plugins...))
	if err != nil {
		return err
	}
	for _, l := range libs {
		if err := copyFile(l, filepath.Join(root, l), 0o755); err != nil {
			return err
		}
	}
	return stageModules(ctx, k, root, busybox)
}

// lddPathRe matches a library path in ldd output ("libc.so.6 =>
// /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux... (0x...)").
var lddPathRe = regexp.MustCompile(`(?m)(?:=>\s*|^\s*)(/\S+)\s+\(0x`)

// sharedLibraries lists, deduplicated, the libraries the files load.
func sharedLibraries(ctx context.Context, files []string) ([]string, error) {
	seen := map[string]bool{}
	for _, f := range files {
		out, err := exec.CommandContext(ctx, "ldd", f).CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "not a dynamic executable") {
				continue
			}
			return nil, fmt.Errorf("ldd %s: %w\n%s", f, err, out)
		}
		for _, m := range lddPathRe.FindAllStringSubmatch(string(out), -1) {
			seen[m[1]] = true
		}
	}
	libs := make([]string, 0, len(seen))
	for l := range seen {
		libs = append(libs, l)
	}
	slices.Sort(libs)
	return libs, nil
}

// stageModules copies moduleDirs and indexes them with busybox depmod, so
// the guest's modprobe (and the kernel's autoload through it) finds
// modules and their dependencies by name and alias.
func stageModules(ctx context.Context, k *Kernel, root, busybox string) error {
	src := k.ModulesDir()
	dst := filepath.Join(root, "lib/modules", k.Release)
	for _, f := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo"} {
		if err := copyFile(filepath.Join(src, f), filepath.Join(dst, f), 0o644); err != nil {
			return err
		}
	}
	for _, rel := range moduleDirs {
		err := filepath.WalkDir(filepath.Join(src, rel), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".ko") {
				return err
			}
			r, _ := filepath.Rel(src, p)
			return copyFile(p, filepath.Join(dst, r), 0o644)
		})
		if err != nil {
			return fmt.Errorf("copy modules %s: %w", rel, err)
		}
	}
	if out, err := exec.CommandContext(ctx, busybox, "depmod", "-b", root, k.Release).CombinedOutput(); err != nil {
		return fmt.Errorf("busybox depmod: %w\n%s", err, out)
	}
	return nil
}

func copyFile(src, dst string, perm os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := os.WriteFile(dst, data, perm); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return nil
}
