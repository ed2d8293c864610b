package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodenet/nodenet/cluster"
	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/nettest"
)

// buildBinaries builds nodenet and nodenet-cni into a temp dir once.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "nodenet-bin-")
		if buildErr != nil {
			return
		}
		for pkg, out := range map[string]string{"../cmd/nodenet": "nodenet", "../cmd/nodenet-cni": "nodenet-cni"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, out), pkg)
			if out == "nodenet-cni" {
				cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as shipped: no dynamic loader per exec
			}
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func randName() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// upCluster runs `nodenet up` as a real process and returns the admin
// kubeconfig; cleanup stops it and checks nothing is left behind.
func upCluster(t *testing.T, backend, proxyMode string) (name, dir, bin string) {
	nettest.SkipShort(t, "starts a local cluster")
	nettest.RequirePrivileged(t)
	bin = filepath.Join(binaries(t), "nodenet")
	name, dir = randName(), t.TempDir()
	out := &nettest.Buffer{}
	cmd := exec.Command(bin, "up", "--nodes", "3", "--backend", backend, "--dir", dir, "--name", name, "--api-port", "0", "--proxy-mode", proxyMode)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			logDaemonPods(t, filepath.Join(dir, "admin.kubeconfig"))
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("nodenet up exited with %v", err)
			}
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("nodenet up did not stop within 60s")
		}
		if t.Failed() {
			t.Logf("nodenet up output:\n%s", out.String())
			for _, f := range []string{"node-1-agent", "controller-manager"} {
				b, _ := os.ReadFile(filepath.Join(dir, "logs", f+".log"))
				t.Logf("%s.log (tail):\n%s", f, tail(string(b), 3000))
			}
		}
		// down after up is a no-op and must succeed.
		if b, err := exec.Command(bin, "down", "--dir", dir, "--name", name).CombinedOutput(); err != nil {
			t.Errorf("nodenet down: %v: %s", err, b)
		}
		checkNothingLeft(t, name, bin)
		// The nodes' bpffs and cgroup mounts are below dir.
		if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), " "+dir+"/") {
			t.Errorf("mounts below %s left behind:\n%s", dir, b)
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "admin.kubeconfig")); err == nil {
			// `up` reports the node daemons ready once every flanneld and
			// proxy answers its health endpoint.
			if strings.Contains(out.String(), "node daemons") || strings.Contains(out.String(), "not ready") {
				break
			}
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("nodenet up exited early: %v\n%s", err, out.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster did not come up:\n%s", out.String())
		}
	}
	return name, dir, bin
}

// logDaemonPods logs the tail of every DaemonSet pod container's log, as
// `kubectl logs` gets it (through the agents).
func logDaemonPods(t *testing.T, kubeconfig string) {
	cs, err := cluster.Client(kubeconfig)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods("nodenet-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("daemon pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: ptr(int64(40))}).DoRaw(ctx)
			t.Logf("%s/%s on %s (err %v):\n%s", p.Name, c.Name, p.Spec.NodeName, err, b)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func checkNothingLeft(t *testing.T, name, bin string) {
	t.Helper()
	left, _ := netnsutil.List(cluster.Prefix(name))
	for _, n := range left {
		t.Errorf("namespace %s left behind", n)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), cluster.Prefix(name)) {
		t.Errorf("mounts left behind:\n%s", b)
	}
	for i := 1; i <= 3; i++ {
		if cg, err := cluster.NodeCgroup(name, i); err == nil {
			if _, err := os.Stat(cg); err == nil {
				t.Errorf("node cgroup %s left behind", cg)
			}
		}
	}
	// The slice goes with the last cluster: empty, it is a leftover (a
	// cluster of a parallel test may be creating its cgroup in it this
	// moment, so look twice).
	if cg, err := cluster.NodeCgroup(name, 1); err == nil {
		slice := filepath.Dir(cg)
		for look := 1; ; look++ {
			ents, err := os.ReadDir(slice)
			busy := slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.IsDir() })
			if err != nil || busy {
				break
			}
			if look == 2 {
				t.Errorf("empty cgroup %s left behind", slice)
				break
			}
			time.Sleep(time.Second)
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if exe, err := os.Readlink(filepath.Join("/proc", p.Name(), "exe")); err == nil && exe == bin {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
			t.Errorf("process %s left behind: %s", p.Name(), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
}

func TestUpPodsConnectDown(t *testing.T) {
	for _, backend := range cluster.Backends {
		t.Run(backend, func(t *testing.T) {
			name, dir, bin := upCluster(t, backend, "iptables")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cs, err := cluster.Client(filepath.Join(dir, "admin.kubeconfig"))
			if err != nil {
				t.Fatal(err)
			}
			nodes, err := cluster.WaitNodesReady(ctx, cs, 3, 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			const ns = "default"
			for i := 1; i <= 6; i++ {
				if _, err := cs.CoreV1().Pods(ns).Create(ctx, cluster.EchoPod(ns, fmt.Sprintf("echo-%d", i), map[string]string{"app": "echo"}), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			pods, err := cluster.WaitPodsReady(ctx, cs, ns, "app=echo", 6, 60*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			check := func(ok bool, format string, args ...any) {
				if !ok {
					t.Errorf(format, args...)
				}
			}
			cluster.CheckPodSubnets(pods, nodes, check)
			for _, from := range pods {
				for _, to := range pods {
					if from.Name == to.Name {
						continue
					}
					reply, err := cluster.Probe(ctx, bin, &from, fmt.Sprintf("tcp://%s:%d", to.Status.PodIP, cluster.EchoTCPPort))
					check(err == nil && strings.HasPrefix(reply, to.Name+":"), "%s -> %s: %q %v", from.Name, to.Name, reply, err)
				}
			}
			if backend == cluster.BackendAlloc {
				t.Run("vpc route deleted by hand is restored", func(t *testing.T) { repairVPCRoute(t, ctx, name, nodes) })
				t.Run("status shows the vpc route table", func(t *testing.T) {
					out, err := exec.Command(bin, "status", "--dir", dir).CombinedOutput()
					if err != nil {
						t.Fatalf("nodenet status: %v\n%s", err, out)
					}
					for _, n := range nodes {
						if want := n.Spec.PodCIDR + " via " + strings.Split(n.Status.Addresses[0].Address, "/")[0]; !strings.Contains(string(out), want) {
							t.Errorf("nodenet status shows no %q:\n%s", want, out)
						}
					}
				})
			}
			if backend != "host-gw" {
				return
			}
			t.Run("node credentials are confined to their node", func(t *testing.T) { nodeCredentials(t, ctx, dir) })
			t.Run("bad command fails the pod", func(t *testing.T) { badCommand(t, ctx, cs) })
			t.Run("delete releases IP and netns", func(t *testing.T) { deletePod(t, ctx, cs, dir, pods[0]) })
			t.Run("agent kill -9 keeps pods", func(t *testing.T) { killAgent(t, ctx, cs, dir, bin, name, pods[1:]) })
			t.Run("node restart", func(t *testing.T) { restartNode(t, cs, dir, bin, name, pods[1:]) })
		})
	}
}

// TestUpNFTablesDemo runs the demo's checks (every pod pair, a Service by
// ClusterIP from every pod, by NodePort on every node, and by its
// LoadBalancer IP from outside the nodes and from a pod) on a cluster
// whose proxies use the nftables data plane; `make run` covers iptables.
func TestUpNFTablesDemo(t *testing.T) {
	name, dir, bin := upCluster(t, "vxlan", "nftables")
	out := runDemo(t, name, dir, bin, "(service) answered by echo-", "(LoadBalancer) answered by echo-", "external client (netns "+cluster.VPCNetns(name)+")")
	t.Logf("demo:\n%s", out)
}

// runDemo runs the demo's checks on a cluster from upCluster, fails the
// test on a failed check or when the output lacks one of want, and returns
// the output.
func runDemo(t *testing.T, name, dir, bin string, want ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	cs, err := cluster.Client(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	fails, err := cluster.RunDemo(ctx, cs, cluster.DemoOptions{Binary: bin, Kubeconfig: kubeconfig, Nodes: 3, Pods: 4, ExternalNetns: cluster.VPCNetns(name), Out: &out})
	if err != nil || fails != 0 {
		t.Fatalf("demo: %d failed checks, err %v\n%s", fails, err, out.String())
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Fatalf("the demo checked no %q:\n%s", w, out.String())
		}
	}
	return out.String()
}

// repairVPCRoute deletes each node's podCIDR route from the vpc router
// and measures how long the controller manager's cloud routes take to put
// it back (the reconcile period, 10 s, bounds it; the route watch makes it
// milliseconds).
func repairVPCRoute(t *testing.T, ctx context.Context, name string, nodes []corev1.Node) {
	vpc := cluster.VPCNetns(name)
	for _, n := range nodes {
		route := func() string {
			out, _ := exec.Command("ip", "-n", vpc, "route", "show", n.Spec.PodCIDR).Output()
			return strings.TrimSpace(string(out))
		}
		want := route()
		if want == "" {
			t.Fatalf("the vpc router has no route for %s's podCIDR %s", n.Name, n.Spec.PodCIDR)
		}
		start := time.Now()
		if out, err := exec.Command("ip", "-n", vpc, "route", "del", n.Spec.PodCIDR).CombinedOutput(); err != nil {
			t.Fatalf("delete %s: %v: %s", n.Spec.PodCIDR, err, out)
		}
		for deadline := time.Now().Add(12 * time.Second); ; time.Sleep(time.Millisecond) {
			if got := route(); got != "" {
				if got != want {
					t.Errorf("route restored as %q, was %q", got, want)
				}
				t.Logf("vpc route %q restored %s after its deletion", got, time.Since(start).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("vpc route for %s not restored within 12s (reconcile period 10s)", n.Spec.PodCIDR)
			}
		}
	}
}

func badCommand(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	p := cluster.EchoPod("default", "bad", nil)
	p.Spec.Containers[0].Command = []string{"/no/such/binary"}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got, _ = cs.CoreV1().Pods("default").Get(ctx, "bad", metav1.GetOptions{})
		if got != nil && got.Status.Phase == corev1.PodFailed {
			break
		}
	}
	if got == nil || got.Status.Phase != corev1.PodFailed || !strings.Contains(got.Status.Message, "/no/such/binary") {
		t.Fatalf("pod with a missing command: want Failed with a message naming the command, got %+v", got.Status)
	}
	t.Logf("failed pod message: %s", got.Status.Message)
	n, err := cs.CoreV1().Nodes().Get(ctx, got.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Errorf("node %s not Ready after a failed pod", n.Name)
		}
	}
}

func ipFiles(t *testing.T, dir, node string) map[string]bool {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(dir, "nodes", node, "var/lib/cni/networks/cbr0"))
	out := map[string]bool{}
	for _, e := range ents {
		if strings.Count(e.Name(), ".") == 3 {
			out[e.Name()] = true
		}
	}
	return out
}

func deletePod(t *testing.T, ctx context.Context, cs kubernetes.Interface, dir string, p corev1.Pod) {
	if !ipFiles(t, dir, p.Spec.NodeName)[p.Status.PodIP] {
		t.Fatalf("no IPAM record for %s in %s", p.Status.PodIP, p.Spec.NodeName)
	}
	if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not gone after 30s", p.Name)
		}
	}
	if ipFiles(t, dir, p.Spec.NodeName)[p.Status.PodIP] {
		t.Errorf("IP %s still allocated after delete", p.Status.PodIP)
	}
	if _, err := os.Stat(netnsutil.Path(p.Annotations["nodenet.io/netns"])); err == nil {
		t.Errorf("netns %s still there after delete", p.Annotations["nodenet.io/netns"])
	}
}

// agentPID finds the agent process of a node by its command line.
func agentPID(bin, node string) int {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 2 && args[0] == bin && args[1] == "agent" && strings.Contains(string(b), "\x00--node-name\x00"+node+"\x00") {
			var pid int
			fmt.Sscan(p.Name(), &pid)
			return pid
		}
	}
	return 0
}

func killAgent(t *testing.T, ctx context.Context, cs kubernetes.Interface, dir, bin, name string, pods []corev1.Pod) {
	node := pods[0].Spec.NodeName
	pid := agentPID(bin, node)
	if pid == 0 {
		t.Fatalf("agent of %s not found", node)
	}
	before := ipFiles(t, dir, node)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The supervisor restarts it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if p := agentPID(bin, node); p != 0 && p != pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent of %s not restarted", node)
		}
	}
	time.Sleep(3 * time.Second) // adoption and CNI GC
	live, err := cluster.WaitPodsReady(ctx, cs, "default", "app=echo", len(pods), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range live {
		for _, q := range pods {
			if p.Name == q.Name && p.Status.PodIP != q.Status.PodIP {
				t.Errorf("%s changed IP %s -> %s across an agent restart", p.Name, q.Status.PodIP, p.Status.PodIP)
			}
		}
	}
	reply, err := cluster.Probe(ctx, bin, &pods[0], fmt.Sprintf("tcp://%s:%d", pods[len(pods)-1].Status.PodIP, cluster.EchoTCPPort))
	if err != nil {
		t.Errorf("traffic after agent restart: %v", err)
	}
	_ = reply
	after := ipFiles(t, dir, node)
	if len(after) != len(before) {
		t.Errorf("IPs on %s: %v before the agent restart, %v after", node, before, after)
	}
}

func TestMain(m *testing.M) {
	// Started by owner tests as "nodenet up": a process that looks like a
	// cluster's supervisor until killed.
	if os.Getenv("NODENET_TEST_FAKE_UP") == "1" {
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// runUp runs `nodenet up` to completion (a refused or --demo-exit run)
// and returns its output.
func runUp(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"up"}, args...)...)
	out := &nettest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Signal(syscall.SIGTERM)
		t.Fatalf("nodenet up %v did not finish:\n%s", args, out.String())
		return "", nil
	}
}

func netnsOf(name string) []string {
	names, _ := netnsutil.List(cluster.Prefix(name))
	return names
}

// TestUpOneOwnerPerCluster: a second `up` on a live cluster (same dir, or
// same name from another dir) is refused with who runs it and how to reach
// and remove it, and leaves the cluster alone; a busy API port is refused
// before anything is touched; two `up` started at once end with one
// cluster; --replace and `down` stop the live `up` and take over.
func TestUpOneOwnerPerCluster(t *testing.T) {
	name, dir, bin := upCluster(t, "host-gw", "iptables")
	st, err := cluster.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cluster.Client(filepath.Join(dir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	before := netnsOf(name)
	otherDir := filepath.Join(t.TempDir(), "other")
	for _, args := range [][]string{
		{"--dir", dir, "--name", name, "--nodes", "1"},
		{"--dir", otherDir, "--name", name, "--nodes", "1", "--api-port", "0"},
	} {
		start := time.Now()
		out, err := runUp(t, bin, args...)
		if err == nil {
			t.Fatalf("second up %v succeeded:\n%s", args, out)
		}
		for _, want := range []string{fmt.Sprintf("cluster %q is running: nodenet up pid %d", name, st.PID), "admin.kubeconfig", fmt.Sprintf("https://127.0.0.1:%d", st.APIPort), "nodenet down --dir " + dir, "--replace"} {
			if !strings.Contains(out, want) {
				t.Errorf("second up %v: output lacks %q:\n%s", args, want, out)
			}
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("refusal took %v", took)
		}
		t.Logf("second up %v refused:\n%s", args, out)
	}
	if _, err := os.Stat(otherDir); err == nil {
		t.Errorf("a refused up created its state directory")
	}
	if after := netnsOf(name); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("namespaces changed by refused ups: %v -> %v", before, after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cluster.WaitNodesReady(ctx, cs, 3, 30*time.Second); err != nil {
		t.Errorf("cluster after refused ups: %v", err)
	}

	t.Run("busy API port", func(t *testing.T) {
		other := randName()
		fresh := filepath.Join(t.TempDir(), "s")
		out, err := runUp(t, bin, "--dir", fresh, "--name", other, "--nodes", "1", "--api-port", fmt.Sprint(st.APIPort))
		if err == nil || !strings.Contains(out, fmt.Sprintf("127.0.0.1:%d is already in use", st.APIPort)) || !strings.Contains(out, "--api-port 0") {
			t.Fatalf("up on a busy port: %v\n%s", err, out)
		}
		if ns := netnsOf(other); len(ns) > 0 {
			t.Errorf("up on a busy port created namespaces %v", ns)
		}
		if _, err := os.Stat(filepath.Join(fresh, "cluster.json")); err == nil {
			t.Errorf("up on a busy port wrote a cluster state")
		}
	})

	t.Run("two at once", func(t *testing.T) {
		other, fresh := randName(), t.TempDir()
		type result struct {
			out string
			err error
		}
		res := make(chan result, 2)
		for range 2 {
			go func() {
				out, err := runUp(t, bin, "--dir", fresh, "--name", other, "--nodes", "1", "--api-port", "0", "--demo-exit")
				res <- result{out, err}
			}()
		}
		a, b := <-res, <-res
		if (a.err == nil) == (b.err == nil) {
			t.Fatalf("two ups at once: want exactly one to succeed\nfirst: %v\n%s\nsecond: %v\n%s", a.err, a.out, b.err, b.out)
		}
		refused := a
		if a.err == nil {
			refused = b
		}
		if !strings.Contains(refused.out, "is running") && !strings.Contains(refused.out, "is starting") {
			t.Errorf("refused up does not say why:\n%s", refused.out)
		}
		checkNothingLeft(t, other, "")
	})

	t.Run("replace", func(t *testing.T) {
		out, err := runUp(t, bin, "--replace", "--dir", dir, "--name", name, "--nodes", "1", "--api-port", "0", "--demo-exit")
		if err != nil || !strings.Contains(out, fmt.Sprintf("replacing: stopped nodenet up pid %d", st.PID)) || !strings.Contains(out, "node daemons") {
			t.Fatalf("up --replace: %v\n%s", err, out)
		}
	})
	// The replacing up exited (--demo-exit): down finds nothing to stop and
	// removes nothing live, and everything is gone (checked in cleanup).
	if out, err := exec.Command(bin, "down", "--dir", dir).CombinedOutput(); err != nil || strings.Contains(string(out), "stopped") {
		t.Errorf("down after replace: %v: %s", err, out)
	}
}

// TestDownStopsLiveUp: `down` on a running cluster stops its `up`, which
// tears its cluster down and exits cleanly.
func TestDownStopsLiveUp(t *testing.T) {
	name, dir, bin := upCluster(t, "host-gw", "none")
	st, err := cluster.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "down", "--dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("stopped nodenet up pid %d", st.PID)) {
		t.Fatalf("down on a live cluster: %v: %s", err, out)
	}
	if ns := netnsOf(name); len(ns) > 0 {
		t.Errorf("namespaces left after down: %v", ns)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("state directory %s left after down", dir)
	}
}

// TestUpCleansUpAfterKilledUp: an `up` killed with -9 leaves its
// components running in their namespaces and its state behind; that is
// not a live cluster, and the next `up` removes it and starts.
func TestUpCleansUpAfterKilledUp(t *testing.T) {
	nettest.SkipShort(t, "starts a local cluster")
	nettest.RequirePrivileged(t)
	bin := filepath.Join(binaries(t), "nodenet")
	name, dir := randName(), t.TempDir()
	t.Cleanup(func() {
		if b, err := exec.Command(bin, "down", "--dir", dir, "--name", name).CombinedOutput(); err != nil {
			t.Errorf("nodenet down: %v: %s", err, b)
		}
		checkNothingLeft(t, name, "")
		if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), " "+dir+"/") {
			t.Errorf("mounts below %s left behind:\n%s", dir, b)
		}
	})
	args := []string{"up", "--nodes", "1", "--dir", dir, "--name", name, "--api-port", "0", "--proxy-mode", "none"}
	cmd := exec.Command(bin, args...)
	out := &nettest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(90 * time.Second); !strings.Contains(out.String(), "nodes Ready"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("first up did not come up:\n%s", out.String())
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(netnsOf(name)) == 0 {
		t.Fatalf("the killed up left nothing behind; the test proves nothing")
	}
	// Nor may its node's bpffs and cgroup mounts stop the next up.
	if b, _ := os.ReadFile("/proc/self/mountinfo"); !strings.Contains(string(b), " "+filepath.Join(dir, "nodes/node-1/sys/fs/bpf")+" ") {
		t.Fatalf("the killed up left no bpffs mount on node-1's root; the test proves nothing")
	}
	second, err := runUp(t, bin, append(args[1:], "--demo-exit")...)
	if err != nil || !strings.Contains(second, "node daemons") {
		t.Fatalf("up after a killed up: %v\n%s", err, second)
	}
}

// nodeCredentials: the agents' kubeconfigs carry per-node identities that
// the API server confines to their own node: node-1 may patch its own Node, not node-2 nor a Service.
func nodeCredentials(t *testing.T, ctx context.Context, dir string) {
	kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "nodes", cluster.NodeName(1), "etc/nodenet/kubelet.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	var token string
	for _, ai := range kc.AuthInfos {
		token = ai.Token
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if token == "" || token == cfg.BearerToken {
		t.Fatalf("node-1's kubeconfig has no token of its own")
	}
	cfg.BearerToken = token
	node1 := kubernetes.NewForConfigOrDie(cfg)
	patch := []byte(`{"metadata":{"labels":{"nodenet.io/credentials-test":"x"}}}`)
	if _, err := node1.CoreV1().Nodes().Patch(ctx, cluster.NodeName(1), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("node-1 patches its own Node: %v", err)
	}
	if _, err := node1.CoreV1().Nodes().Patch(ctx, cluster.NodeName(2), types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node-1 patches node-2: %v, want 403", err)
	}
	if err := node1.CoreV1().Services("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node-1 deletes the kubernetes Service: %v, want 403", err)
	}
}
