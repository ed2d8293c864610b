package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestHostPathTypes(t *testing.T) {
	root := t.TempDir()
	a := &Agent{o: Options{HostRoot: root}}
	if got := a.hostPath("/run/flannel"); got != filepath.Join(root, "run/flannel") {
		t.Errorf("hostPath = %s", got)
	}
	if got := a.hostPath("../../etc"); got != filepath.Join(root, "etc") {
		t.Errorf("hostPath escapes the root: %s", got)
	}
	dir, file := a.hostPath("/a/dir"), a.hostPath("/b/xtables.lock")
	if err := checkHostPath(dir, corev1.HostPathDirectoryOrCreate); err != nil {
		t.Fatal(err)
	}
	if err := checkHostPath(file, corev1.HostPathFileOrCreate); err != nil {
		t.Fatal(err)
	}
	var ve *volumeError
	for _, c := range []struct {
		path string
		typ  corev1.HostPathType
		ok   bool
	}{
		{dir, corev1.HostPathDirectory, true}, {file, corev1.HostPathFile, true}, {dir, corev1.HostPathUnset, true},
		{dir, corev1.HostPathFile, false}, {file, corev1.HostPathDirectory, false}, {a.hostPath("/none"), corev1.HostPathUnset, false},
		{a.hostPath("/none"), corev1.HostPathDirectory, false}, {file, corev1.HostPathSocket, false},
	} {
		err := checkHostPath(c.path, c.typ)
		if (err == nil) != c.ok || (err != nil && !errors.As(err, &ve)) {
			t.Errorf("%s as %q: %v", c.path, c.typ, err)
		}
	}
}

func TestConfigMapVolumeItemsModesAndAtomicUpdate(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"},
		Data: map[string]string{"net-conf.json": "{}", "cni-conf.json": "v1", "other": "x"}}
	client := fake.NewClientset(cm)
	a, _ := offlineAgent(t)
	a.o.Client = client
	w := newPodWorker(a, "uid-1")
	dir := filepath.Join(t.TempDir(), "config")
	src := &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr.To[int32](0o600),
		Items: []corev1.KeyToPath{{Key: "net-conf.json", Path: "net-conf.json"}, {Key: "cni-conf.json", Path: "sub/cni.json", Mode: ptr.To[int32](0o640)}}}
	ctx := context.Background()
	if err := w.writeConfigMapVolume(ctx, "ns", dir, src); err != nil {
		t.Fatal(err)
	}
	check := func(rel, content string, mode os.FileMode) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, rel))
		st, serr := os.Stat(filepath.Join(dir, rel))
		if err != nil || serr != nil || string(b) != content || st.Mode().Perm() != mode {
			t.Errorf("%s: %q %v (%v, %v), want %q %v", rel, b, st.Mode().Perm(), err, serr, content, mode)
		}
	}
	check("net-conf.json", "{}", 0o600)
	check("sub/cni.json", "v1", 0o640)
	if _, err := os.Lstat(filepath.Join(dir, "other")); !os.IsNotExist(err) {
		t.Errorf("key not in items written: %v", err)
	}
	first, _ := os.Readlink(filepath.Join(dir, "..data"))
	// Unchanged: nothing rewritten.
	if err := w.writeConfigMapVolume(ctx, "ns", dir, src); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Readlink(filepath.Join(dir, "..data")); again != first {
		t.Errorf("unchanged ConfigMap rewrote the volume: %s -> %s", first, again)
	}
	cm.Data["cni-conf.json"] = "v2"
	if _, err := client.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.writeConfigMapVolume(ctx, "ns", dir, src); err != nil {
		t.Fatal(err)
	}
	check("sub/cni.json", "v2", 0o640)
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("old version %s left: %v", first, err)
	}
	// A missing key fails the volume (retried), unless optional.
	src.Items = append(src.Items, corev1.KeyToPath{Key: "absent", Path: "absent"})
	var ve *volumeError
	if err := w.writeConfigMapVolume(ctx, "ns", dir, src); !errors.As(err, &ve) {
		t.Errorf("missing key: %v", err)
	}
	src.Optional = ptr.To(true)
	if err := w.writeConfigMapVolume(ctx, "ns", dir, src); err != nil {
		t.Errorf("optional missing key: %v", err)
	}
}
