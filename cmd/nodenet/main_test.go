package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
)

// The test binary doubles as the nodenet binary: with NODENET_TEST_EXEC=1 it
// runs main() on its arguments, so tests start real nodenet processes
// without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("NODENET_TEST_EXEC") == "1" {
		os.Args = append([]string{"nodenet"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// process is a nodenet subcommand running as a child process.
type process struct {
	cmd *exec.Cmd
	out nettest.Buffer
}

func startNodenet(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(os.Args[0], args...)}
	p.cmd.Env = append(os.Environ(), "NODENET_TEST_EXEC=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start nodenet %v: %v", args, err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("output of nodenet %s:\n%s", args[0], p.out.String())
		}
	})
	return p
}

func TestControllerManagerLeaderElection(t *testing.T) {
	nettest.SkipShort(t, "runs controller-manager processes")
	s := testapi.Start(t)
	ctx := testapi.Context(t)
	kubeconfig := s.KubeconfigPath()
	const lease = 3 * time.Second
	cm := func(id string) *process {
		return startNodenet(t, "controller-manager", "--kubeconfig", kubeconfig, "--controllers", "nodeipam",
			"--cluster-cidr", "10.244.0.0/16", "--healthz-bind-address", "",
			"--leader-elect-lease-duration", lease.String(), "--leader-elect-renew-deadline", "2s",
			"--leader-elect-retry-period", "250ms", "--leader-elect-identity", id)
	}
	procs := map[string]*process{"cm-a": cm("cm-a"), "cm-b": cm("cm-b")}

	holder := func() string {
		l, err := s.Client.CoordinationV1().Leases("kube-system").Get(ctx, "nodenet-controller-manager", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	testapi.Eventually(t, 30*time.Second, "a leader", func() bool { return holder() != "" })
	leader := holder()
	standby := "cm-a"
	if leader == "cm-a" {
		standby = "cm-b"
	}

	node := func(name string) string {
		if _, err := s.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var cidr string
		testapi.Eventually(t, 30*time.Second, "podCIDR for "+name, func() bool {
			n, err := s.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			cidr = n.Spec.PodCIDR
			return err == nil && cidr != ""
		})
		return cidr
	}
	first := node("node-1")
	if strings.Contains(procs[standby].out.String(), "became leader") {
		t.Fatalf("standby %s started controllers while %s leads", standby, leader)
	}

	// kill -9: the lease is not released, the standby must wait it out.
	killed := time.Now()
	if err := procs[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testapi.Eventually(t, 30*time.Second, "hand-over to "+standby, func() bool { return holder() == standby })
	if took := time.Since(killed); took > lease+2*time.Second {
		t.Errorf("hand-over took %v, want within the lease duration %v (+ retry slack)", took, lease)
	}
	second := node("node-2")
	if first == second {
		t.Fatalf("the new leader handed out %s twice", first)
	}
	if !strings.Contains(procs[standby].out.String(), "became leader") {
		t.Fatalf("new leader %s did not log taking over", standby)
	}
}
