package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/kubectltest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/internal/version"
)

func writeFixture(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCapacityFromMachineFiles(t *testing.T) {
	dir := t.TempDir()
	f := machineFiles{
		meminfo:      writeFixture(t, dir, "meminfo", "MemTotal:        8000000 kB\nMemFree:  1 kB\n"),
		cgroupCPUMax: writeFixture(t, dir, "cpu.max", "50000 100000\n"),
		cgroupMemMax: writeFixture(t, dir, "memory.max", "1073741824\n"),
		osRelease:    writeFixture(t, dir, "os-release", "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
		machineID:    writeFixture(t, dir, "machine-id", "abc123\n"),
		bootID:       writeFixture(t, dir, "boot_id", "b-1\n"),
		productUUID:  filepath.Join(dir, "unreadable"),
	}
	c, err := f.capacity(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The cgroup quota (half a CPU) and memory limit (1 GiB) are below the
	// machine's, so they win.
	if got := c[corev1.ResourceCPU]; got.MilliValue() != 500 {
		t.Errorf("cpu = %s, want 500m", got.String())
	}
	if got := c[corev1.ResourceMemory]; got.Value() != 1<<30 {
		t.Errorf("memory = %s, want 1Gi", got.String())
	}
	if got := c[corev1.ResourceEphemeralStorage]; got.Value() <= 0 {
		t.Errorf("ephemeral-storage = %s", got.String())
	}
	if got := c[corev1.ResourcePods]; got.Value() != maxPods {
		t.Errorf("pods = %s", got.String())
	}
	// Without limits the machine's size counts.
	f.cgroupCPUMax = writeFixture(t, dir, "cpu.max", "max 100000\n")
	f.cgroupMemMax = writeFixture(t, dir, "memory.max", "max\n")
	if c, err = f.capacity(dir); err != nil {
		t.Fatal(err)
	}
	if got := c[corev1.ResourceCPU]; got.MilliValue() != int64(runtime.NumCPU())*1000 {
		t.Errorf("cpu = %s, want %d CPUs", got.String(), runtime.NumCPU())
	}
	if got := c[corev1.ResourceMemory]; got.Value() != 8000000*1024 {
		t.Errorf("memory = %s", got.String())
	}
	info := f.systemInfo("v9.9.9")
	if info.OSImage != "Debian GNU/Linux 12 (bookworm)" || info.ContainerRuntimeVersion != "nodenet://v9.9.9" ||
		info.MachineID != "abc123" || info.BootID != "b-1" || info.SystemUUID != "" || info.KernelVersion == "" ||
		info.Architecture != runtime.GOARCH || info.OperatingSystem != "linux" {
		t.Errorf("system info %+v", info)
	}
	f.meminfo = writeFixture(t, dir, "meminfo", "MemFree: 1 kB\n")
	if _, err := f.capacity(dir); err == nil || !regexp.MustCompile(`no MemTotal line`).MatchString(err.Error()) {
		t.Errorf("meminfo without MemTotal: %v", err)
	}
}

// kubectlBinary is the real kubectl 1.33 (internal/kubectltest).
func kubectlBinary(t *testing.T) string {
	t.Helper()
	return kubectltest.Version(t, "1.33")
}

func runKubectl(t *testing.T, bin, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(t.TempDir(), "cache")}, args...)...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestDescribeNodeShowsSanePercentages runs the agent in-process without a
// CNI network (so it starts no pod and touches no kernel state): the node
// it registers has real capacity, and kubectl computes pod requests as a
// percentage of it.
func TestDescribeNodeShowsSanePercentages(t *testing.T) {
	kubectl := kubectlBinary(t)
	srv := testapi.Start(t)
	ctx := testapi.Context(t)
	a, err := New(Options{Client: srv.Client, NodeName: "cap-node", NodeIP: "127.0.0.1", CNIConfDir: t.TempDir(),
		StateDir: t.TempDir(), Logger: testapi.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	var node *corev1.Node
	testapi.Eventually(t, 30*time.Second, "node capacity", func() bool {
		node, err = srv.Client.CoreV1().Nodes().Get(ctx, "cap-node", metav1.GetOptions{})
		return err == nil && !node.Status.Allocatable.Cpu().IsZero()
	})
	if node.Status.NodeInfo.ContainerRuntimeVersion != "nodenet://"+version.GitVersion || node.Status.NodeInfo.KernelVersion == "" {
		t.Errorf("node info %+v", node.Status.NodeInfo)
	}
	// A pod bound to the node with requests; the agent cannot start it (no
	// CNI network), so it stays Pending and counts against the node.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "req", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "cap-node",
		Containers: []corev1.Container{{Name: "c", Image: "none", Command: []string{"sleep", "60"}, Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}}
	if _, err := srv.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := runKubectl(t, kubectl, srv.KubeconfigPath(), "describe", "node", "cap-node")
	if err != nil {
		t.Fatalf("kubectl describe node: %v\n%s", err, out)
	}
	alloc := node.Status.Allocatable
	wantCPU := int64(float64(100) / float64(alloc.Cpu().MilliValue()) * 100)
	wantMem := int64(float64(64<<20) / float64(alloc.Memory().Value()) * 100)
	for _, want := range []string{
		fmt.Sprintf(`cpu\s+100m \(%d%%\)`, wantCPU),
		fmt.Sprintf(`memory\s+64Mi \(%d%%\)`, wantMem),
		`Container Runtime Version:\s+nodenet://` + regexp.QuoteMeta(version.GitVersion),
		`ephemeral-storage:\s+\d+`,
		`cpu:\s+` + regexp.QuoteMeta(alloc.Cpu().String()),
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("kubectl describe node lacks %q:\n%s", want, out)
		}
	}
	if regexp.MustCompile(`-\d+%`).MatchString(out) {
		t.Errorf("negative percentage in kubectl describe node:\n%s", out)
	}
}
