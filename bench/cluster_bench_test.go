package bench

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/cluster"
	"github.com/nodenet/nodenet/internal/nettest"
)

var (
	clusterNodes = flag.Int("nodenet.cluster.nodes", 3, "nodes of the local cluster")
	clusterPods  = flag.Int("nodenet.cluster.pods", 100, "echo pods created at once")
)

// BenchmarkClusterUp measures the local cluster end to end, with real
// processes: a cold `nodenet up --nodes 3` until every node is Ready (API
// server, controller manager, agents, flanneld), then -nodenet.cluster.pods
// echo pods created at once until each is Running and Ready (scheduler,
// agent, CNI plugin, the pod's process, a TCP readiness probe with a 1 s
// period), reported as p50/p99 per pod and the total.
func BenchmarkClusterUp(b *testing.B) {
	nettest.RequirePrivileged(b)
	bin := b.TempDir()
	for pkg, out := range map[string]string{"../cmd/nodenet": "nodenet", "../cmd/nodenet-cni": "nodenet-cni"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, out), pkg)
		if out == "nodenet-cni" {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", pkg, err, o)
		}
	}
	for i := 0; i < b.N; i++ {
		benchClusterOnce(b, filepath.Join(bin, "nodenet"))
	}
}

func benchClusterOnce(b *testing.B, bin string) {
	dir := b.TempDir()
	var out bytes.Buffer
	start := time.Now()
	cmd := exec.Command(bin, "up", "--nodes", fmt.Sprint(*clusterNodes), "--dir", dir, "--name", fmt.Sprintf("b%d", os.Getpid()%100000), "--api-port", "0")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kc := filepath.Join(dir, "admin.kubeconfig")
	for {
		if _, err := os.Stat(kc); err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			b.Fatalf("no kubeconfig after 1m:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cs, err := cluster.Client(kc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cluster.WaitNodesReady(ctx, cs, *clusterNodes, 2*time.Minute); err != nil {
		b.Fatalf("%v\n%s", err, out.String())
	}
	up := time.Since(start)

	created := map[string]time.Time{}
	t0 := time.Now()
	for i := 0; i < *clusterPods; i++ {
		name := fmt.Sprintf("bench-%d", i)
		created[name] = time.Now()
		if _, err := cs.CoreV1().Pods("default").Create(ctx, cluster.EchoPod("default", name, map[string]string{"app": "bench"}), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	readyAt := map[string]time.Duration{}
	for len(readyAt) < *clusterPods {
		if ctx.Err() != nil {
			b.Fatalf("%d of %d pods Ready after 5m", len(readyAt), *clusterPods)
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=bench"})
		if err == nil {
			for _, p := range pods.Items {
				if _, ok := readyAt[p.Name]; ok || p.Status.Phase != corev1.PodRunning {
					continue
				}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						readyAt[p.Name] = time.Since(created[p.Name])
					}
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	total := time.Since(t0)
	var lat []time.Duration
	for _, d := range readyAt {
		lat = append(lat, d)
	}
	l := Summarize(lat)
	b.ReportMetric(up.Seconds(), "s-up-to-nodes-ready")
	b.ReportMetric(total.Seconds(), "s-all-pods-ready")
	b.ReportMetric(Ms(l.P50), "ms-pod-ready-p50")
	b.ReportMetric(Ms(l.P99), "ms-pod-ready-p99")
	b.Logf("up --nodes %d → Ready: %s; %d pods created → all Running+Ready: %s; per pod %s", *clusterNodes, up.Round(time.Millisecond), *clusterPods, total.Round(time.Millisecond), l)
}
