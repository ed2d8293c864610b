package ebpf

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/internal/testapi"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

const wait = 10 * time.Second

func clusterIP(svc *v1.Service) string {
	return net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port))
}

// kernelEnv is proxytest's topology (client, node, two pods, API server,
// dual-stack proxy core) with this data plane attached to a throwaway
// cgroup that holds the test process.
type kernelEnv struct {
	*proxytest.Env
	cgroup, pins string
}

func newKernelEnv(t *testing.T) *kernelEnv {
	nettest.RequirePrivileged(t)
	nettest.SkipShort(t, "the real-kernel socket-LB suite")
	k := &kernelEnv{}
	k.Env = proxytest.NewEnv(t, func(t testing.TB, _ *nettest.NS, f proxy.Family) proxy.DataPlane {
		return k.dataPlane(f)
	})
	k.pins = testBPFFS(t)
	k.cgroup = testCgroup(t)
	t.Cleanup(func() {
		for _, f := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
			if err := k.dataPlane(f).Cleanup(context.Background()); err != nil {
				t.Errorf("cleanup %s: %v", f, err)
			}
		}
	})
	return k
}

func (k *kernelEnv) dataPlane(f proxy.Family) *DataPlane {
	return New(Config{Family: f, Cgroup: k.cgroup, PinDir: filepath.Join(k.pins, familyDir(f)), Log: testapi.Logger()})
}

// dial connects from the client namespace and reads who answered.
func (k *kernelEnv) dial(addr string) (proxytest.Reply, error) {
	return proxytest.DialTCP(k.Client, addr, time.Second)
}

func (k *kernelEnv) backends(addr string, n int) (map[string]int, error) {
	seen := map[string]int{}
	for range n {
		r, err := k.dial(addr)
		if err != nil {
			return seen, err
		}
		seen[r.Backend]++
	}
	return seen, nil
}

func TestKernelSocketLB(t *testing.T) {
	k := newKernelEnv(t)
	k.StartProxy(t)
	t.Run("ClusterIPReachesBothEndpoints", func(t *testing.T) {
		svc := k.CreateService(t, proxytest.Service("web", v1.ProtocolTCP, proxytest.TCPPort))
		k.SetEndpoints(t, svc, proxytest.TCPPort, proxytest.Pod1, proxytest.Pod2)
		proxytest.Eventually(t, wait, "both endpoints behind "+clusterIP(svc), func() error {
			seen, err := k.backends(clusterIP(svc), 20)
			if err == nil && (seen["pod1"] == 0 || seen["pod2"] == 0) {
				err = fmt.Errorf("answers %v", seen)
			}
			return err
		})
	})
}
