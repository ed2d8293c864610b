package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/daemonset"
	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/testapi"
)

// A hostNetwork pod the way the DaemonSet's is built: in the node's
// namespace, env from the downward API and a ConfigMap with $(VAR)
// expansion, hostPath volumes under the node root and a ConfigMap volume
// at mount paths that do not exist on the host (which stays untouched),
// init containers in order (the first fails once and is retried), the
// image's nodenet path mapped to the built binary with an HTTP readiness
// probe on 127.0.0.1, and adoption by a restarted agent.
func TestHostNetworkPodEnvVolumesInitAndAdoption(t *testing.T) {
	n := startNode(t)
	ctx := testapi.Context(t)
	tag := n.ns.Name()
	cfgDir, runDir, outDir := "/etc/"+tag+"-cfg", "/run/"+tag+"-flannel", "/tmp/"+tag+"-out"
	t.Cleanup(func() { _ = os.Remove(cfgDir); _ = os.Remove(runDir); _ = os.Remove(outDir) })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cfg"},
		Data: map[string]string{"proxyMode": "nftables", "net-conf.json": `{"Network":"10.244.0.0/16"}`}}
	if _, err := n.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`set -e
echo main >> %[3]s/order
{
  echo "node=$NODE_NAME pod=$POD_NAME ns=$POD_NAMESPACE ip=$POD_IP app=$APP mode=$PROXY_MODE combined=$COMBINED arg=$1"
  echo "netns=$(stat -L -c %%i /proc/self/ns/net)"
  echo "conf=$(cat %[1]s/net-conf.json)"
  if touch %[1]s/x 2>/dev/null; then echo "cfg writable"; else echo "cfg read-only"; fi
} > %[2]s/result
exec sleep 3600`, cfgDir, runDir, outDir)
	dirOrCreate := ptr.To(corev1.HostPathDirectoryOrCreate)
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	mounts := []corev1.VolumeMount{{Name: "out", MountPath: outDir}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ds-like", Namespace: "default", Labels: map[string]string{"app": "nodenet"}},
		Spec: corev1.PodSpec{NodeName: n.name, HostNetwork: true,
			Volumes: []corev1.Volume{
				{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/test-out", Type: dirOrCreate}}},
				{Name: "run-flannel", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/flannel", Type: dirOrCreate}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "net-conf.json", Path: "net-conf.json"}}}}},
			},
			InitContainers: []corev1.Container{
				{Name: "init-1", Image: "host", VolumeMounts: mounts, Command: sh(fmt.Sprintf(`echo init-1 >> %[1]s/order; [ -e %[1]s/failed-once ] || { touch %[1]s/failed-once; exit 3; }`, outDir))},
				{Name: "init-2", Image: "host", VolumeMounts: mounts, Command: sh(fmt.Sprintf(`echo init-2 >> %s/order`, outDir))},
			},
			Containers: []corev1.Container{
				{Name: "main", Image: "host", Command: []string{"sh", "-c", script, "sh"}, Args: []string{"$(PROXY_MODE)-arg"},
					Env: []corev1.EnvVar{
						{Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
						{Name: "APP", ValueFrom: field("metadata.labels['app']")},
						{Name: "PROXY_MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
							LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "proxyMode"}}},
						{Name: "COMBINED", Value: "$(NODE_NAME):$(PROXY_MODE):$$(NODE_NAME):$(UNDEFINED)"},
					},
					VolumeMounts: append([]corev1.VolumeMount{{Name: "run-flannel", MountPath: runDir}, {Name: "config", MountPath: cfgDir, ReadOnly: true}}, mounts...)},
				{Name: "web", Image: daemonset.DefaultImage, Command: []string{daemonset.NodenetPath, "echo", "--tcp=", "--udp=", "--http=127.0.0.1:18080"},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Host: "127.0.0.1", Port: intstr.FromInt32(18080), Path: "/"}}}},
			}}}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.dumpOnFailure(t, "default", "ds-like")
	ready := func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	got := n.waitPod(t, "ds-like", "Ready (after init-1's back-off)", ready)
	if got.Status.PodIP != "127.0.0.1" || got.Status.HostIP != "127.0.0.1" {
		t.Errorf("podIP %s hostIP %s, want the node's IP", got.Status.PodIP, got.Status.HostIP)
	}
	if is := got.Status.InitContainerStatuses; len(is) != 2 || is[0].RestartCount != 1 || is[0].State.Terminated == nil ||
		is[0].State.Terminated.ExitCode != 0 || is[1].State.Terminated == nil {
		t.Errorf("init container statuses: %+v", is)
	}
	if got.Annotations[NetnsAnnotation] != "" {
		t.Errorf("hostNetwork pod got a namespace: %s", got.Annotations[NetnsAnnotation])
	}
	out := filepath.Join(n.hostRoot, "var/lib/test-out")
	if b, err := os.ReadFile(filepath.Join(out, "order")); err != nil || string(b) != "init-1\ninit-1\ninit-2\nmain\n" {
		t.Errorf("order of runs: %q, %v", b, err)
	}
	var result string
	testapi.Eventually(t, 10*time.Second, "the container's report in the node root's /run/flannel", func() bool {
		b, err := os.ReadFile(filepath.Join(n.hostRoot, "run/flannel/result"))
		result = string(b)
		return err == nil && strings.Contains(result, "cfg ")
	})
	ino, err := netnsutil.InodeOf(n.ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"node=node-a pod=ds-like ns=default ip=127.0.0.1 app=nodenet mode=nftables combined=node-a:nftables:$(NODE_NAME):$(UNDEFINED) arg=nftables-arg",
		fmt.Sprintf("netns=%d", ino.Ino),
		`conf={"Network":"10.244.0.0/16"}`,
		"cfg read-only",
	} {
		if !strings.Contains(result, want+"\n") {
			t.Errorf("container saw:\n%s\nwant a line %q", result, want)
		}
	}
	for _, p := range []string{cfgDir, runDir, outDir} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("mount path %s appeared on the host: %v", p, err)
		}
	}

	// A restarted agent adopts the pod: same processes, no new runs.
	before := got.Status.ContainerStatuses
	n.stopAgent(syscall.SIGKILL)
	n.startAgent(t)
	time.Sleep(4 * time.Second)
	after := n.waitPod(t, "ds-like", "Ready after the agent restart", ready)
	for i, cs := range after.Status.ContainerStatuses {
		if cs.RestartCount != 0 || cs.State.Running == nil || !cs.State.Running.StartedAt.Equal(&before[i].State.Running.StartedAt) {
			t.Errorf("container %s after the agent restart: %+v, before %+v", cs.Name, cs.State, before[i].State)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(out, "order")); string(b) != "init-1\ninit-1\ninit-2\nmain\n" {
		t.Errorf("a restarted agent ran containers again: %q", b)
	}
	if is := after.Status.InitContainerStatuses; len(is) != 2 || is[1].State.Terminated == nil {
		t.Errorf("init container statuses after the agent restart: %+v", is)
	}
}

// A command that is neither a host binary nor an image path of the built
// binaries fails the pod with an event that says images are not pulled.
func TestUnmappedImageCommandFailsClearly(t *testing.T) {
	n := startNode(t)
	ctx := testapi.Context(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "flannel", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: n.name, HostNetwork: true,
		Containers: []corev1.Container{{Name: "kube-flannel", Image: "ghcr.io/flannel-io/flannel:v0.26.0", Command: []string{"/opt/bin/flanneld"}}}}}
	if _, err := n.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := n.waitPod(t, "flannel", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if !strings.Contains(p.Status.Message, `image "ghcr.io/flannel-io/flannel:v0.26.0" is not pulled`) {
		t.Errorf("status message %q does not say the image is not pulled", p.Status.Message)
	}
	testapi.Eventually(t, 10*time.Second, "Failed event naming the image", func() bool {
		evs, err := n.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "Failed" && e.InvolvedObject.Name == "flannel" && strings.Contains(e.Message, "/opt/bin/flanneld") {
				return true
			}
		}
		return false
	})
}
