package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The volumes a container mounts, as binds for the shim (mountns.go).
// hostPath P is <host root>/P: on a real host the root is "/", in the
// local cluster each node has a directory of its own, since the nodes
// share one filesystem. configMap and emptyDir volumes are directories
// the agent keeps under <state-dir>/volumes/<pod uid>/<volume>.

// volumeError is a volume that cannot be set up yet (a hostPath of the
// wrong type, a ConfigMap missing): the kubelet's FailedMount, retried.
type volumeError struct{ err error }

func (e *volumeError) Error() string { return e.err.Error() }
func (e *volumeError) Unwrap() error { return e.err }

func (a *Agent) podVolumeDir(uid types.UID) string {
	return filepath.Join(a.o.StateDir, "volumes", string(uid))
}

// hostPath is where a hostPath volume's path is on this agent's filesystem.
func (a *Agent) hostPath(p string) string {
	root := a.o.HostRoot
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, filepath.Clean("/"+p))
}

// containerMounts sets up c's volumes and returns their binds.
func (w *podWorker) containerMounts(ctx context.Context, pod *corev1.Pod, c corev1.Container) ([]Mount, error) {
	var out []Mount
	for _, vm := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == vm.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil {
			return nil, &podError{"CreateContainerConfigError", c.Name, fmt.Errorf("container %q: volumeMount %q names no volume", c.Name, vm.Name)}
		}
		src, err := w.volumeSource(ctx, pod, *vol)
		if err != nil {
			return nil, fmt.Errorf("container %q: volume %q: %w", c.Name, vm.Name, err)
		}
		if vm.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+vm.SubPath))
		}
		out = append(out, Mount{Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
	}
	sa, err := w.serviceAccountMount(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	if sa != nil {
		out = append(out, *sa)
	}
	return out, nil
}

func (w *podWorker) volumeSource(ctx context.Context, pod *corev1.Pod, v corev1.Volume) (string, error) {
	switch {
	case v.HostPath != nil:
		p := w.a.hostPath(v.HostPath.Path)
		t := corev1.HostPathUnset
		if v.HostPath.Type != nil {
			t = *v.HostPath.Type
		}
		return p, checkHostPath(p, t)
	case v.ConfigMap != nil:
		dir := filepath.Join(w.a.podVolumeDir(pod.UID), v.Name)
		return dir, w.writeConfigMapVolume(ctx, pod.Namespace, dir, v.ConfigMap)
	case v.EmptyDir != nil:
		dir := filepath.Join(w.a.podVolumeDir(pod.UID), v.Name)
		return dir, os.MkdirAll(dir, 0o777)
	}
	return "", &podError{"CreateContainerConfigError", "", errors.New("unsupported volume type (hostPath, configMap and emptyDir are)")}
}

// checkHostPath applies a hostPath volume's type, as the kubelet does.
func checkHostPath(p string, t corev1.HostPathType) error {
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		if err := os.MkdirAll(p, 0o755); err != nil {
			return &volumeError{err}
		}
		return nil
	case corev1.HostPathFileOrCreate:
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return &volumeError{err}
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return &volumeError{err}
		}
		return f.Close()
	}
	st, err := os.Stat(p)
	if err != nil {
		// Unset type: no check by the kubelet, but a bind needs a source.
		return &volumeError{fmt.Errorf("hostPath %s: %w", p, err)}
	}
	var ok bool
	switch t {
	case corev1.HostPathUnset:
		ok = true
	case corev1.HostPathDirectory:
		ok = st.IsDir()
	case corev1.HostPathFile:
		ok = st.Mode().IsRegular()
	case corev1.HostPathSocket:
		ok = st.Mode()&os.ModeSocket != 0
	case corev1.HostPathCharDev:
		ok = st.Mode()&os.ModeCharDevice != 0
	case corev1.HostPathBlockDev:
		ok = st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0
	default:
		return &podError{"CreateContainerConfigError", "", fmt.Errorf("unknown hostPath type %q", t)}
	}
	if !ok {
		return &volumeError{fmt.Errorf("hostPath %s is not a %s", p, t)}
	}
	return nil
}

// writeConfigMapVolume writes a configMap volume the kubelet's way, so a
// change is seen all at once: the files are in a timestamped directory,
// "..data" links to it and each top-level name links through "..data";
// a new version is a new directory and one rename of the "..data" link.
// Nothing is written when the content is unchanged.
func (w *podWorker) writeConfigMapVolume(ctx context.Context, ns, dir string, src *corev1.ConfigMapVolumeSource) error {
	files, err := w.configMapFiles(ctx, ns, src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if sameFiles(filepath.Join(dir, "..data"), files) {
		return nil
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	for rel, f := range files {
		p := filepath.Join(ts, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, f.mode); err != nil { // past the umask
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	top := map[string]bool{}
	for rel := range files {
		top[strings.SplitN(rel, "/", 2)[0]] = true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !top[e.Name()] {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	for name := range top {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	if old != "" && old != filepath.Base(ts) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

type volumeFile struct {
	data []byte
	mode os.FileMode
}

// configMapFiles are the files a configMap volume holds: its items, or
// every key, with the item's mode or the volume's defaultMode (0644).
func (w *podWorker) configMapFiles(ctx context.Context, ns string, src *corev1.ConfigMapVolumeSource) (map[string]volumeFile, error) {
	optional := src.Optional != nil && *src.Optional
	cm, err := w.a.o.Client.CoreV1().ConfigMaps(ns).Get(ctx, src.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional {
		return map[string]volumeFile{}, nil
	}
	if err != nil {
		return nil, &volumeError{fmt.Errorf("configmap %q: %w", src.Name, err)}
	}
	mode := os.FileMode(0o644)
	if src.DefaultMode != nil {
		mode = os.FileMode(*src.DefaultMode) & os.ModePerm
	}
	value := func(k string) ([]byte, bool) {
		if v, ok := cm.Data[k]; ok {
			return []byte(v), true
		}
		v, ok := cm.BinaryData[k]
		return v, ok
	}
	out := map[string]volumeFile{}
	if len(src.Items) == 0 {
		for k := range cm.Data {
			out[k] = volumeFile{[]byte(cm.Data[k]), mode}
		}
		for k, v := range cm.BinaryData {
			out[k] = volumeFile{v, mode}
		}
		return out, nil
	}
	for _, it := range src.Items {
		v, ok := value(it.Key)
		if !ok {
			if optional {
				continue
			}
			return nil, &volumeError{fmt.Errorf("configmap %q has no key %q", src.Name, it.Key)}
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode) & os.ModePerm
		}
		rel := filepath.Clean(it.Path)
		if filepath.IsAbs(rel) || strings.HasPrefix(rel, "..") {
			return nil, &podError{"CreateContainerConfigError", "", fmt.Errorf("configmap item path %q escapes the volume", it.Path)}
		}
		out[rel] = volumeFile{v, m}
	}
	return out, nil
}

// sameFiles reports whether dir holds exactly files.
func sameFiles(dir string, files map[string]volumeFile) bool {
	n := 0
	err := filepath.WalkDir(dir+"/", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		f, ok := files[rel]
		st, serr := d.Info()
		if !ok || serr != nil || st.Mode().Perm() != f.mode {
			return errors.New("differs")
		}
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, f.data) {
			return errors.New("differs")
		}
		n++
		return nil
	})
	return err == nil && n == len(files)
}

// refreshConfigMapVolumes rewrites the pod's configMap volumes when their
// ConfigMaps changed, at most once a minute (the kubelet's sync period).
func (w *podWorker) refreshConfigMapVolumes(ctx context.Context, pod *corev1.Pod) {
	if time.Since(w.volumesRefreshed) < time.Minute {
		return
	}
	w.volumesRefreshed = time.Now()
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap == nil {
			continue
		}
		dir := filepath.Join(w.a.podVolumeDir(pod.UID), v.Name)
		if _, err := os.Stat(dir); err != nil {
			continue // no container mounts it yet
		}
		if err := w.writeConfigMapVolume(ctx, pod.Namespace, dir, v.ConfigMap); err != nil {
			w.a.log.Warn("refresh configmap volume", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name, "err", err)
		}
	}
}
