package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// nodePackages are the node's Debian packages (debootstrap --include):
// what kind's own base image installs, with Debian's containerd and runc
// instead of kind's builds, and jq, which kind's mount-product-files hook
// calls.
var nodePackages = []string{
	"systemd", "systemd-sysv", "dbus", "containerd", "runc", "iptables", "nftables", "iproute2", "conntrack",
	"socat", "ethtool", "kmod", "mount", "util-linux", "procps", "pigz", "libseccomp2", "ebtables",
	"ca-certificates", "containernetworking-plugins", "jq", "iputils-ping", "bash",
}

func rootfsKey() string {
	return key(map[string]string{"suite": debianSuite, "variant": "minbase", "include": strings.Join(nodePackages, ",")})
}

// buildRootfs debootstraps the node's root file system once.
func buildRootfs(ctx context.Context, p *progress, c cache, mirror string) (string, error) {
	k := rootfsKey()
	root := filepath.Join(c.dir("rootfs", k), "root")
	if c.complete("rootfs", k) {
		p.note("node rootfs: cached in %s", root)
		return root, nil
	}
	err := p.step(ctx, "debootstrap "+debianSuite+" node rootfs ("+fmt.Sprint(len(nodePackages))+" packages)", func(ctx context.Context) error {
		if err := os.RemoveAll(root); err != nil {
			return err
		}
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "nice", "-n", "19", "debootstrap", "--variant=minbase",
			"--include="+strings.Join(nodePackages, ","), debianSuite, root, mirror)
		if err := runLogged(cmd, filepath.Join(c.dir("rootfs", k), "debootstrap.log")); err != nil {
			return fmt.Errorf("debootstrap (is the debootstrap package installed?): %w", err)
		}
		return c.markComplete("rootfs", k)
	})
	return root, err
}

// runLogged runs cmd with its output in a log file, naming the file in
// the error.
func runLogged(cmd *exec.Cmd, log string) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w (output in %s)", strings.Join(cmd.Args, " "), err, log)
	}
	return nil
}

// nodeInputs is what the node image is assembled from.
type nodeInputs struct {
	rootfs     string // debootstrapped root
	kindFiles  string // kind's images/base/files in the module cache
	kubernetes string // dir with kubeadm, kubelet, kubectl
	crictl     string // crictl binary
	images     []componentImage
}

// componentImage is one image archive the node's containerd must hold
// before kubeadm runs (nothing can be pulled).
type componentImage struct {
	ref, archive string
}

// containerdConfig adapts kind's containerd configuration: the sandbox
// image is ours, and restrict_oom_score_adj must be true because runc
// cannot lower oom_score_adj without CAP_SYS_RESOURCE, which this Docker
// cannot grant (every pod sandbox fails otherwise).
func containerdConfig(kindConfig, pauseRef string) (string, error) {
	var out []string
	seen := 0
	for _, line := range strings.Split(kindConfig, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "sandbox_image"):
			line, seen = fmt.Sprintf("  sandbox_image = %q", pauseRef), seen+1
		case strings.HasPrefix(t, "restrict_oom_score_adj"):
			line, seen = "  restrict_oom_score_adj = true", seen+1
		}
		out = append(out, line)
	}
	if seen != 2 {
		return "", fmt.Errorf("kind's containerd config has no sandbox_image or restrict_oom_score_adj line to adapt")
	}
	return strings.Join(out, "\n"), nil
}

// criBaseSpec is kind's /etc/containerd/cri-base.json: containerd's default
// OCI spec with kind's createContainer hook (mounts the node's product_uuid
// into pods) and no rlimits.
func criBaseSpec(defaultSpec []byte) ([]byte, error) {
	var spec map[string]any
	if err := json.Unmarshal(defaultSpec, &spec); err != nil {
		return nil, fmt.Errorf("parse ctr oci spec: %w", err)
	}
	hooks, _ := spec["hooks"].(map[string]any)
	if hooks == nil {
		hooks = map[string]any{}
	}
	cc, _ := hooks["createContainer"].([]any)
	hooks["createContainer"] = append(cc, map[string]any{"path": "/kind/bin/mount-product-files.sh"})
	spec["hooks"] = hooks
	if proc, ok := spec["process"].(map[string]any); ok {
		delete(proc, "rlimits")
	}
	return json.MarshalIndent(spec, "", "    ")
}

// nodeInit runs before kind's entrypoint. Without --privileged, Docker
// mounts the cgroup hierarchies read-only; kind's entrypoint (which makes
// the /kubelet cgroup root), systemd and kubelet must write them. The node
// has its own cgroup namespace and mount namespace, so this exposes
// nothing more of the host than --privileged would.
const nodeInit = "/usr/local/bin/nodenet-node-init"

const nodeInitScript = `#!/bin/sh
# Written by nodenet's bench/kind: cgroup mounts writable, then kind's entrypoint.
for m in $(findmnt -lun -o target -t cgroup,cgroup2); do
	mount -o remount,bind,rw "$m" || exit 1
done
# Nothing bound for the Service or pod networks may leave through the
# node's default route (out of the machine) before the proxy and flanneld
# have their rules and routes: those are more specific or DNAT first.
ip route add blackhole ` + serviceSubnet + ` || exit 1
ip route add blackhole ` + podSubnet + ` || exit 1
# A machine's systemd mounts the bpf file system at /sys/fs/bpf; a node
# container's does not. The ebpf proxy mode pins its maps and links there
# (the DaemonSet's hostPath), so that they outlive the proxy's restarts.
[ "$(stat -f -c %T /sys/fs/bpf)" = bpf_fs ] || mount -t bpf bpf /sys/fs/bpf || exit 1
exec /usr/local/bin/entrypoint "$@"
`

// stageNode turns a copy of the rootfs at stage into a kind node's root.
func stageNode(ctx context.Context, stage string, in nodeInputs, pauseRef string) error {
	// debootstrap keeps the .debs it installed: not in the image.
	debs, _ := filepath.Glob(filepath.Join(stage, "var/cache/apt/archives/*.deb"))
	for _, d := range debs {
		if err := os.Remove(d); err != nil {
			return err
		}
	}
	if err := copyTree(in.kindFiles, stage); err != nil {
		return fmt.Errorf("copy kind's node files: %w", err)
	}
	for _, d := range []string{"usr/local/bin", "kind/bin"} {
		ents, _ := os.ReadDir(filepath.Join(stage, d))
		for _, e := range ents {
			if err := os.Chmod(filepath.Join(stage, d, e.Name()), 0o755); err != nil {
				return err
			}
		}
	}
	cfgPath := filepath.Join(stage, "etc/containerd/config.toml")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	cfg, err := containerdConfig(string(raw), pauseRef)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	def, err := exec.CommandContext(ctx, "chroot", stage, "ctr", "oci", "spec").Output()
	if err != nil {
		return fmt.Errorf("chroot ctr oci spec: %w", err)
	}
	spec, err := criBaseSpec(def)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(stage, "etc/containerd/cri-base.json"), spec, 0o644); err != nil {
		return err
	}
	for _, b := range []string{"kubeadm", "kubelet", "kubectl"} {
		if err := copyFile(filepath.Join(in.kubernetes, b), filepath.Join(stage, "usr/bin", b), 0o755); err != nil {
			return err
		}
	}
	if err := copyFile(in.crictl, filepath.Join(stage, "usr/local/bin/crictl"), 0o755); err != nil {
		return err
	}
	// kind's units expect containerd in /usr/local/bin; Debian's is in
	// /usr/bin. CNI plugins: containerd looks in /opt/cni/bin, Debian
	// installs them in /usr/lib/cni.
	links := map[string]string{"usr/local/bin/containerd": "/usr/bin/containerd", "sbin/init": "/lib/systemd/systemd",
		"etc/systemd/system/systemd-binfmt.service": "/dev/null"}
	for _, u := range []string{"kubelet.service", "containerd.service", "undo-mount-hacks.service"} {
		links["etc/systemd/system/multi-user.target.wants/"+u] = "/etc/systemd/system/" + u
	}
	for _, dir := range []string{"etc/systemd/system/multi-user.target.wants", "lib/systemd/system/multi-user.target.wants",
		"lib/systemd/system/local-fs.target.wants", "lib/systemd/system/basic.target.wants"} {
		if err := os.RemoveAll(filepath.Join(stage, dir)); err != nil {
			return err
		}
	}
	plugins, _ := filepath.Glob(filepath.Join(stage, "usr/lib/cni/*"))
	for _, pl := range plugins {
		links["opt/cni/bin/"+filepath.Base(pl)] = "/usr/lib/cni/" + filepath.Base(pl)
	}
	for at, to := range links {
		p := filepath.Join(stage, at)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		os.Remove(p)
		if err := os.Symlink(to, p); err != nil {
			return err
		}
	}
	// As kind's base image: tmpfiles setup would clean the node's /tmp,
	// and journald must not read the host's kernel log.
	os.Remove(filepath.Join(stage, "lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service"))
	jc, err := os.OpenFile(filepath.Join(stage, "etc/systemd/journald.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	fmt.Fprintln(jc, "ReadKMsg=no")
	jc.Close()
	if err := os.WriteFile(filepath.Join(stage, strings.TrimPrefix(nodeInit, "/")), []byte(nodeInitScript), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(stage, "etc/kubernetes/manifests"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stage, "kind/version"), []byte(kubernetesVersion), 0o644)
}

func copyFile(from, to string, mode os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// copyTree copies regular files and directories of from into to (kind's
// file tree has nothing else).
func copyTree(from, to string) error {
	return filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		return copyFile(p, dst, 0o644)
	})
}

// nodeKey is the node image's tag: everything it is assembled from.
func nodeKey(in nodeInputs, goKeys []string, pauseRef string) string {
	refs := make([]string, 0, len(in.images))
	for _, im := range in.images {
		refs = append(refs, im.ref)
	}
	sort.Strings(refs)
	return key(map[string]string{"rootfs": rootfsKey(), "go": strings.Join(goKeys, ","), "kind": kindVersion,
		"images": strings.Join(refs, ","), "pause": pauseRef, "init": nodeInitScript, "recipe": "6"})
}

// nodeImageRef is the node image's name; the tag carries the key, so a
// warm run finds it with docker image inspect.
func nodeImageRef(k string) string { return "nodenet/kind-node:" + kubernetesVersion + "-" + k }

// assembleNode imports the staged root as an image, then starts it once
// with containerd alone to import the component images (content only,
// unpacked on first use, as kind's own node images are) and commits that.
func assembleNode(ctx context.Context, p *progress, d docker, stage string, images []componentImage, ref string) error {
	base := ref + "-base"
	tar := exec.CommandContext(ctx, "tar", "-C", stage, "--numeric-owner", "-c", ".")
	imp := d.command(ctx, "import", "-", base)
	pipe, err := tar.StdoutPipe()
	if err != nil {
		return err
	}
	imp.Stdin = pipe
	if err := tar.Start(); err != nil {
		return err
	}
	if out, err := imp.CombinedOutput(); err != nil {
		tar.Wait()
		return fmt.Errorf("docker import: %w: %s", err, out)
	}
	if err := tar.Wait(); err != nil {
		return fmt.Errorf("tar node rootfs: %w", err)
	}
	defer d.run(context.Background(), "image", "rm", base)
	name := "nodenet-kind-node-build"
	d.run(ctx, "rm", "-f", name)
	if _, err := d.run(ctx, "run", "-d", "--name", name, "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
		"--security-opt", "seccomp=unconfined", "--tmpfs", "/run", "--tmpfs", "/tmp", "--entrypoint", "/usr/bin/containerd", base); err != nil {
		return err
	}
	defer d.run(context.Background(), "rm", "-f", "-v", name)
	if err := d.waitExec(ctx, name, 30, "ctr", "version"); err != nil {
		return fmt.Errorf("containerd in the build container: %w", err)
	}
	for _, im := range images {
		f, err := os.Open(im.archive)
		if err != nil {
			return err
		}
		cmd := d.command(ctx, "exec", "-i", name, "ctr", "-n", "k8s.io", "images", "import", "--no-unpack", "-")
		cmd.Stdin = f
		out, err := cmd.CombinedOutput()
		f.Close()
		if err != nil {
			return fmt.Errorf("import %s into the node's containerd: %w: %s", im.ref, err, out)
		}
		p.note("containerd: %s", im.ref)
	}
	if _, err := d.run(ctx, "stop", "-t", "10", name); err != nil {
		return err
	}
	_, err = d.run(ctx, "commit",
		"--change", `ENTRYPOINT ["`+nodeInit+`", "/sbin/init"]`,
		"--change", `CMD []`,
		// No STOPSIGNAL (docker commit cannot set it): kind removes
		// nodes with docker rm -f, never a graceful stop.
		"--change", "ENV container=docker",
		name, ref)
	return err
}
