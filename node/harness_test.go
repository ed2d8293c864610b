package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/internal/testbin"
)

// The privileged tests run the real thing: the nodenet binary's agent as
// a process inside a throwaway network namespace, nodenet-cni attaching
// pods to a cni0 bridge in that namespace, and an in-process API server
// on the root namespace's loopback. The agent reaches the API server
// through nettest.ForwardLoopback, at the same address; the API server
// reaches the agent's kubelet port through its DialNode hook, which dials
// from inside the namespace. Nothing touches the root namespace's network.

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

type testNode struct {
	agentArgs []string
	agentLog  *os.File
	agent     *exec.Cmd
	exited    chan struct{}

	name     string
	ns       *nettest.NS
	srv      *testapi.Server
	client   kubernetes.Interface
	stateDir string
	hostRoot string // the agent's --host-root
	apiInNS  string // the API server's address inside the namespace (the agent's --pod-api-server)
	kubeconf string // the agent's kubeconfig
}

// dialIn dials from inside the namespace.
func dialIn(ns *nettest.NS) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netnsutil.Do(ns.Path(), func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// startNode runs an API server and one agent with a CNI network.
func startNode(t *testing.T) *testNode {
	t.Helper()
	nettest.SkipShort(t, "runs a node agent with pods in namespaces")
	ns := nettest.New(t)
	bin := testbin.Build(t)
	srv := testapi.Start(t, func(c *apiserver.Config) { c.DialNode = dialIn(ns) })
	dir := t.TempDir()
	n := &testNode{name: "node-a", ns: ns, srv: srv, client: srv.Client, stateDir: filepath.Join(dir, "state"), hostRoot: filepath.Join(dir, "root")}

	// The agent in ns reaches the API server at the address in its
	// kubeconfig, relayed to the root namespace's loopback.
	apiAddr := strings.TrimPrefix(srv.URL(), "https://")
	nettest.ForwardLoopback(t, ns, apiAddr)
	agentKC := srv.KubeconfigPath()
	n.apiInNS, n.kubeconf = apiAddr, agentKC
	for _, d := range []string{"conf", "bin", "cache", "ipam", "state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(bin, "nodenet-cni"), filepath.Join(dir, "bin", "nodenet")); err != nil {
		t.Fatal(err)
	}
	subnetEnv := writeFixture(t, dir, "subnet.env", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n")
	writeFixture(t, filepath.Join(dir, "conf"), "10-nodenet.conflist", fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "cbr0", "plugins": [
  {"type": "nodenet", "subnetFile": %q, "dataDir": %q, "bridge": "cni0", "isDefaultGateway": true}]}`, subnetEnv, filepath.Join(dir, "ipam")))

	prefix := ns.Name() + "-p"
	logPath := filepath.Join(dir, "agent.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	n.agentArgs = []string{filepath.Join(bin, "nodenet"), "agent", "--kubeconfig", agentKC, "--node-name", n.name, "--node-ip", "127.0.0.1",
		"--cni-conf-dir", filepath.Join(dir, "conf"), "--cni-bin-dir", filepath.Join(dir, "bin"), "--cni-cache-dir", filepath.Join(dir, "cache"),
		"--state-dir", n.stateDir, "--host-root", n.hostRoot, "--pod-api-server", n.apiInNS, "--netns-prefix", prefix, "--node-status-update-frequency", "2s"}
	n.agentLog = logf
	n.startAgent(t)
	t.Cleanup(func() {
		n.stopPods(t, prefix)
		n.stopAgent(syscall.SIGTERM)
		logf.Close()
		// Whatever the agent left behind (it failed) goes too.
		left, _ := netnsutil.List(prefix)
		for _, name := range left {
			t.Errorf("pod namespace %s left behind", name)
			_ = netnsutil.Delete(name)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("agent log (tail):\n%s", tailString(string(b), 4000))
		}
	})
	ctx := testapi.Context(t)
	testapi.Eventually(t, 60*time.Second, "node Ready with a kubelet port", func() bool {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil || node.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
			return false
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	return n
}

// startAgent starts the agent process inside the node's namespace.
func (n *testNode) startAgent(t *testing.T) {
	t.Helper()
	cmd := exec.Command(n.agentArgs[0], n.agentArgs[1:]...)
	cmd.Stdout, cmd.Stderr = n.agentLog, n.agentLog
	if err := netnsutil.Start(n.ns.Path(), cmd); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	n.agent, n.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(n.exited)
}

// stopAgent signals the agent and waits (SIGKILL after 15 s).
func (n *testNode) stopAgent(sig syscall.Signal) {
	_ = n.agent.Process.Signal(sig)
	select {
	case <-n.exited:
	case <-time.After(15 * time.Second):
		_ = n.agent.Process.Kill()
		<-n.exited
	}
}

// stopPods deletes every pod and waits for the agent to tear them down.
func (n *testNode) stopPods(t *testing.T, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	_ = n.client.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}, metav1.ListOptions{})
	for ctx.Err() == nil {
		pods, err := n.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		left, _ := netnsutil.List(prefix)
		if err == nil && len(pods.Items) == 0 && len(left) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("pods not torn down within 45s")
}

// runPod creates a pod on the node running command.
func (n *testNode) runPod(t *testing.T, name string, command []string, policy corev1.RestartPolicy) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: n.name, RestartPolicy: policy,
		Containers: []corev1.Container{{Name: "main", Image: "host", Command: command}}}}
	if _, err := n.client.CoreV1().Pods("default").Create(testapi.Context(t), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// waitPod polls the pod until cond holds.
func (n *testNode) waitPod(t *testing.T, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testapi.Eventually(t, 60*time.Second, name+": "+what, func() bool {
		p, err := n.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		pod = p
		return cond(p)
	})
	return pod
}

// dumpOnFailure logs a pod's status and its containers' logs at the end
// of a failed test.
func (n *testNode) dumpOnFailure(t *testing.T, namespace, name string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if p, err := n.client.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{}); err == nil {
			t.Logf("pod %s status: %+v", name, p.Status)
		}
		logs, _ := filepath.Glob(filepath.Join(n.stateDir, "logs", namespace+"_"+name+"_*", "*", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, tailString(string(b), 3000))
		}
	})
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func sh(script string) []string { return []string{"sh", "-c", script} }
