package manifest

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodenet/nodenet/daemonset"
	"github.com/nodenet/nodenet/subnetenv"
)

// CleanupName names the uninstall DaemonSet.
const CleanupName = "nodenet-cleanup"

// cniDataDir is where the CNI plugin keeps its address reservations.
const cniDataDir = "/var/lib/cni"

const cleanupHeader = `# nodenet uninstall: after ` + "`kubectl delete -f daemonset/nodenet.yaml`" + `, one pod per node runs
# ` + "`nodenet cleanup`" + ` (flanneld's routes, devices, rules and files, the CNI plugin's bridge,
# reservations and binaries, every proxy mode's rules) and then stays Running. A node whose
# cleanup failed restarts its pod (CrashLoopBackOff); the log names what is left.
# Rendered by ` + "`nodenet manifest --cleanup`" + `.
#   kubectl apply -f cleanup.yaml
#   kubectl -n nodenet-system logs -l app.kubernetes.io/name=nodenet-cleanup | grep 'cleanup done'
#   kubectl delete -f cleanup.yaml
`

// RenderCleanup returns the uninstall manifest: the namespace (the
// install's went with it) and a DaemonSet running `nodenet cleanup` on
// every node, with the install's host paths.
func RenderCleanup(o Options) ([]byte, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return render(cleanupHeader, CleanupObjects(o))
}

// CleanupObjects are the uninstall manifest's objects in apply order.
func CleanupObjects(o Options) []runtime.Object {
	return []runtime.Object{namespace(o), cleanupDaemonSet(o)}
}

func cleanupDaemonSet(o Options) *appsv1.DaemonSet {
	labels := map[string]string{"app.kubernetes.io/name": CleanupName}
	privileged, automount := true, false
	maxUnavailable := intstr.FromString("100%")
	return &appsv1.DaemonSet{
		TypeMeta:   typeMeta("apps/v1", "DaemonSet"),
		ObjectMeta: metav1.ObjectMeta{Name: CleanupName, Namespace: o.Namespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork: true,
					DNSPolicy:   corev1.DNSClusterFirstWithHostNet,
					// It talks to no API: no token to mount.
					AutomountServiceAccountToken: &automount,
					// The nodes nodenet ran on, and no others.
					NodeSelector: o.NodeSelector,
					Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "cleanup", Image: o.Image, ImagePullPolicy: corev1.PullIfNotPresent,
						// --stay: a DaemonSet's pod must not exit; a
						// failed cleanup exits non-zero and is retried
						// with the kubelet's back-off.
						Command: []string{daemonset.NodenetPath, "cleanup", "--stay",
							"--subnet-file", subnetenv.DefaultPath, "--install-cni-conf", CNIConfPath,
							"--cni-bin-dir", CNIBinDir, "--cni-data-dir", cniDataDir + "/networks"},
						SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
						VolumeMounts: []corev1.VolumeMount{mount("run-flannel", "/run/flannel", false), mount("cni-conf", "/etc/cni/net.d", false),
							mount("cni-bin", CNIBinDir, false), mount("cni-data", cniDataDir, false),
							mount("xtables-lock", "/run/xtables.lock", false), mount("modules", "/lib/modules", true), mount("bpffs", "/sys/fs/bpf", false),
							mount("cgroup", "/sys/fs/cgroup", true)},
					}},
					Volumes: []corev1.Volume{
						hostPath("run-flannel", "/run/flannel", corev1.HostPathDirectoryOrCreate),
						hostPath("cni-conf", "/etc/cni/net.d", corev1.HostPathDirectoryOrCreate),
						hostPath("cni-bin", CNIBinDir, corev1.HostPathDirectoryOrCreate),
						hostPath("cni-data", cniDataDir, corev1.HostPathDirectoryOrCreate),
						hostPath("xtables-lock", "/run/xtables.lock", corev1.HostPathFileOrCreate),
						hostPath("modules", "/lib/modules", corev1.HostPathDirectoryOrCreate),
						// A proxy mode's pins, for the modes that keep
						// them.
						hostPath("bpffs", "/sys/fs/bpf", corev1.HostPathDirectoryOrCreate),
						// The ebpf mode's cgroup: unpinning its links
						// detaches them, so cleanup only reads it, but
						// every host path the install uses is reachable
						// here too.
						hostPath("cgroup", "/sys/fs/cgroup", corev1.HostPathDirectoryOrCreate),
					},
				},
			},
		},
	}
}
