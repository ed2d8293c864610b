package node

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/daemonset"
)

func TestRuntimeConfLikeContainerd(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 81}},
	}}}}
	rt := runtimeConf(pod, "cid", "/run/netns/x")
	args := map[string]string{}
	for _, a := range rt.Args {
		args[a[0]] = a[1]
	}
	if args["K8S_POD_NAMESPACE"] != "ns" || args["K8S_POD_NAME"] != "p" || args["K8S_POD_INFRA_CONTAINER_ID"] != "cid" || args["IgnoreUnknown"] != "1" {
		t.Errorf("CNI_ARGS %v", rt.Args)
	}
	pms, _ := rt.CapabilityArgs["portMappings"].([]map[string]any)
	if len(pms) != 1 || pms[0]["hostPort"] != int32(8080) || pms[0]["protocol"] != "tcp" {
		t.Errorf("portMappings %v", rt.CapabilityArgs)
	}
	if rt.IfName != "eth0" || rt.NetNS != "/run/netns/x" {
		t.Errorf("runtime conf %+v", rt)
	}
}

func TestResolveCommand(t *testing.T) {
	w := &podWorker{a: &Agent{o: Options{Self: "/opt/nodenet"}}}
	argv, err := w.resolve(corev1.Container{Name: "c", Command: []string{"nodenet"}, Args: []string{"echo"}}, nil)
	if err != nil || argv[0] != "/opt/nodenet" || argv[1] != "echo" {
		t.Errorf("nodenet echo without nodenet-echo resolved to %v, %v", argv, err)
	}
	// The image's binary paths map to the built binaries; args expand.
	vars := map[string]string{"MODE": "nftables"}
	argv, err = w.resolve(corev1.Container{Name: "c", Command: []string{daemonset.NodenetPath, "proxy"}, Args: []string{"--proxy-mode=$(MODE)", "$$(MODE)"}}, vars)
	if err != nil || !slices.Equal(argv, []string{"/opt/nodenet", "proxy", "--proxy-mode=nftables", "$(MODE)"}) {
		t.Errorf("image nodenet resolved to %v, %v", argv, err)
	}
	argv, err = w.resolve(corev1.Container{Name: "c", Command: []string{daemonset.NodenetCNIPath}}, nil)
	if err != nil || argv[0] != "/opt/nodenet-cni" {
		t.Errorf("image nodenet-cni resolved to %v, %v", argv, err)
	}
	// The proxy's image path: `nodenet proxy` while no nodenet-proxy was
	// built beside nodenet, that binary once it is.
	proxyCtr := corev1.Container{Name: "c", Command: []string{daemonset.NodenetProxyPath}, Args: []string{"--proxy-mode=$(MODE)"}}
	argv, err = w.resolve(proxyCtr, vars)
	if err != nil || !slices.Equal(argv, []string{"/opt/nodenet", "proxy", "--proxy-mode=nftables"}) {
		t.Errorf("image nodenet-proxy without the binary resolved to %v, %v", argv, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nodenet-proxy"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	wp := &podWorker{a: &Agent{o: Options{Self: filepath.Join(dir, "nodenet")}}}
	argv, err = wp.resolve(proxyCtr, vars)
	if err != nil || !slices.Equal(argv, []string{filepath.Join(dir, "nodenet-proxy"), "--proxy-mode=nftables"}) {
		t.Errorf("image nodenet-proxy resolved to %v, %v", argv, err)
	}
	// `nodenet echo` runs the lean nodenet-echo once it is built.
	if err := os.WriteFile(filepath.Join(dir, "nodenet-echo"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	argv, err = wp.resolve(corev1.Container{Name: "c", Command: []string{"nodenet", "echo"}, Args: []string{"--tcp", ":9000"}}, nil)
	if err != nil || !slices.Equal(argv, []string{filepath.Join(dir, "nodenet-echo"), "--tcp", ":9000"}) {
		t.Errorf("nodenet echo resolved to %v, %v", argv, err)
	}
	if m := wp.imageBinaries(proxyCtr); len(m) != 2 || m[1].Target != daemonset.NodenetProxyPath {
		t.Errorf("nodenet-proxy container's binaries: %+v", m)
	}
	_, err = w.resolve(corev1.Container{Name: "c", Image: "quay.io/x/flannel:v1", Command: []string{"/opt/bin/flanneld"}}, nil)
	var unmapped *podError
	if !errors.As(err, &unmapped) || !strings.Contains(err.Error(), `image "quay.io/x/flannel:v1" is not pulled`) {
		t.Errorf("unmapped image command: %v", err)
	}
	_, err = w.resolve(corev1.Container{Name: "c", Command: []string{"no-such-binary-xyz"}}, nil)
	var pe *podError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), `command "no-such-binary-xyz" not found`) {
		t.Errorf("missing command: %v", err)
	}
	if _, err := w.resolve(corev1.Container{Name: "c"}, nil); !errors.As(err, &pe) {
		t.Errorf("no command: %v", err)
	}
}
