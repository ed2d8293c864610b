package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
		t.Errorf("nodenet echo resolved to %v, %v", argv, err)
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

// freePort asks the kernel for a free port on loopback and releases it.
// Another process may take it before the server binds it; the caller then
// sees the server fail to listen and tries another.
func freePort(t *testing.T, network string) int {
	t.Helper()
	switch network {
	case "udp":
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		return pc.LocalAddr().(*net.UDPAddr).Port
	default:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
}

// TestEchoServerAndClient runs the echo server on free loopback ports and
// talks to each of its three listeners through the client.
func TestEchoServerAndClient(t *testing.T) {
	for attempt := 1; ; attempt++ {
		tcp, udp, web := freePort(t, "tcp"), freePort(t, "udp"), freePort(t, "tcp")
		err := echoRoundTrip(t, tcp, udp, web)
		if err == nil {
			return
		}
		if attempt == 3 {
			t.Fatalf("echo server could not listen three times: %v", err)
		}
		t.Logf("attempt %d: %v; trying other ports", attempt, err)
	}
}

// echoRoundTrip returns the server's error if it could not listen (a port
// was taken meanwhile); anything else is checked here.
func echoRoundTrip(t *testing.T, tcp, udp, web int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- RunEcho(ctx, EchoOptions{Name: "pod-a", TCPAddr: fmt.Sprintf("127.0.0.1:%d", tcp),
			UDPAddr: fmt.Sprintf("127.0.0.1:%d", udp), HTTPAddr: fmt.Sprintf("127.0.0.1:%d", web)})
	}()
	want := map[string]string{
		fmt.Sprintf("tcp://127.0.0.1:%d", tcp):   "pod-a: hi",
		fmt.Sprintf("udp://127.0.0.1:%d", udp):   "pod-a: hi",
		fmt.Sprintf("http://127.0.0.1:%d/", web): "pod-a",
	}
	for target, w := range want {
		var got string
		var err error
		for range 50 {
			select {
			case err := <-served:
				return fmt.Errorf("echo server stopped: %w", err)
			default:
			}
			if got, err = EchoClient(ctx, target, "hi", time.Second); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got != w {
			t.Errorf("%s: got %q, %v; want %q", target, got, err, w)
		}
	}
	return nil
}
