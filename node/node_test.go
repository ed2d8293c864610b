package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	argv, err := w.resolve(corev1.Container{Name: "c", Command: []string{"nodenet"}, Args: []string{"echo"}})
	if err != nil || argv[0] != "/opt/nodenet" || argv[1] != "echo" {
		t.Errorf("nodenet echo resolved to %v, %v", argv, err)
	}
	_, err = w.resolve(corev1.Container{Name: "c", Command: []string{"no-such-binary-xyz"}})
	var pe *podError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), `command "no-such-binary-xyz" not found`) {
		t.Errorf("missing command: %v", err)
	}
	if _, err := w.resolve(corev1.Container{Name: "c"}); !errors.As(err, &pe) {
		t.Errorf("no command: %v", err)
	}
}

func TestEchoServerAndClient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = RunEcho(ctx, EchoOptions{Name: "pod-a", TCPAddr: "127.0.0.1:39123", UDPAddr: "127.0.0.1:39124", HTTPAddr: "127.0.0.1:39125"})
	}()
	want := map[string]string{"tcp://127.0.0.1:39123": "pod-a: hi", "udp://127.0.0.1:39124": "pod-a: hi", "http://127.0.0.1:39125/": "pod-a"}
	for target, w := range want {
		var got string
		var err error
		for i := 0; i < 50; i++ {
			if got, err = EchoClient(ctx, target, "hi", time.Second); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got != w {
			t.Errorf("%s: got %q, %v; want %q", target, got, err, w)
		}
	}
}
