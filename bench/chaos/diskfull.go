package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/cluster"
)

// diskFull is issue 17's fault 7 on node-3 (no client runs there): its
// host-local store (<dir>/nodes/node-3/var/lib/cni/networks, the node's
// private directory, never the machine's /var/lib/cni) is moved onto a
// small tmpfs filled to the last block, and a pod is created. Its CNI
// ADD must fail with a clear error and leave no reservation behind; once
// space returns the agent's retry must succeed. The pod is then deleted
// and the store copied back, which must then equal what it was before.
func diskFull(ctx context.Context, e *env) (o Outcome, err error) {
	node := e.nodes[len(e.nodes)-1].Name
	store := filepath.Join(e.dir, "nodes", node, "var", "lib", "cni", "networks")
	before, err := storeFiles(store)
	if err != nil {
		return o, err
	}
	tmp, err := os.MkdirTemp("", "nodenet-chaos-ipam-")
	if err != nil {
		return o, err
	}
	defer os.Remove(tmp)
	if err := unix.Mount("tmpfs", tmp, "tmpfs", 0, "size=256k"); err != nil {
		return o, fmt.Errorf("mount a tmpfs on %s: %w", tmp, err)
	}
	defer func() {
		if uerr := unix.Unmount(tmp, unix.MNT_DETACH); uerr != nil {
			err = errors.Join(err, fmt.Errorf("unmount %s: %w", tmp, uerr))
		}
	}()
	if _, err := run(ctx, "cp", "-a", store+"/.", tmp+"/"); err != nil {
		return o, err
	}
	filler := filepath.Join(tmp, "filler")
	if err := fill(filler); err != nil {
		return o, err
	}
	if err := unix.Mount(tmp, store, "", unix.MS_BIND, ""); err != nil {
		return o, fmt.Errorf("bind the tmpfs on %s: %w", store, err)
	}
	bound := true
	unbind := func() error {
		if !bound {
			return nil
		}
		bound = false
		return unix.Unmount(store, unix.MNT_DETACH)
	}
	defer func() {
		if uerr := unbind(); uerr != nil {
			err = errors.Join(err, fmt.Errorf("unmount %s: %w", store, uerr))
		}
	}()

	pods := e.cs.CoreV1().Pods(workloadNS)
	const name = "disk-full"
	o.Start = time.Now()
	if _, err := pods.Create(ctx, pinned(cluster.EchoPod(workloadNS, name, map[string]string{"app": "disk-full"}), node), metav1.CreateOptions{}); err != nil {
		return o, err
	}
	var msg string
	if waitFor(ctx, e.timeout, func() bool {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && strings.Contains(p.Status.Message, "no space left") {
			msg = p.Status.Message
			return true
		}
		return false
	}).IsZero() {
		return o, fmt.Errorf("no CNI error naming the full disk in the pod's status within %s", e.timeout)
	}
	during, err := storeFiles(tmp)
	if err != nil {
		return o, err
	}
	half := slices.DeleteFunc(during, func(f string) bool { return f == "filler" || slices.Contains(before, f) })
	if err := os.Remove(filler); err != nil {
		return o, err
	}
	o.Restored = time.Now()
	o.Green = waitFor(ctx, e.timeout, func() bool {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != ""
	})
	if o.Green.IsZero() {
		return o, fmt.Errorf("the pod did not start within %s of space returning", e.timeout)
	}
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return o, err
	}
	if waitFor(ctx, e.timeout, func() bool {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}).IsZero() {
		return o, fmt.Errorf("pod %s not gone within %s", name, e.timeout)
	}
	after, err := storeFiles(tmp)
	if err != nil {
		return o, err
	}
	if err := unbind(); err != nil {
		return o, err
	}
	// The store as the tmpfs holds it now is the node's from here on.
	if _, err := run(ctx, "cp", "-a", tmp+"/.", store+"/"); err != nil {
		return o, err
	}
	o.Note = fmt.Sprintf("ADD on the full store: %q; files left by the failed ADD: %d %v; store after the pod came and went equals the one before: %v",
		msg, len(half), half, slices.Equal(before, after))
	if len(half) > 0 || !slices.Equal(before, after) {
		return o, fmt.Errorf("host-local store changed: before %v, after %v, left by the failed ADD %v", before, after, half)
	}
	return o, nil
}

// storeFiles lists the files under a host-local data directory, as
// "<network>/<name>", sorted; the lock file, the last-reserved markers
// and the released files kept as spares (".free-*", see ipam/hostlocal)
// are bookkeeping, not reservations.
func storeFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if base := filepath.Base(rel); base == "lock" || strings.HasPrefix(base, "last_reserved_ip") || strings.HasPrefix(base, ".free-") {
			return nil
		}
		out = append(out, rel)
		return nil
	})
	slices.Sort(out)
	return out, err
}

// fill writes zeros to path until the filesystem is full.
func fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return nil
			}
			return fmt.Errorf("fill %s: %w", path, err)
		}
	}
}

// copyStore copies a host-local data directory without its spare files.
func copyStore(from, to string) error {
	return filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, info.Mode().Perm())
		case strings.HasPrefix(d.Name(), ".free-"):
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, info.Mode().Perm()); err != nil {
			return fmt.Errorf("copy the store to the tmpfs: %w", err)
		}
		return nil
	})
}
