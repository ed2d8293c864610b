package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodenet/nodenet/daemonset"
)

// Filler Services put the benchmark at the scale of a large cluster
// (bench -services N): N ClusterIP Services beside the benchmark's own,
// each with one ready endpoint (the check workload's echo-a). What a new
// connection costs then depends on the proxy's lookup: kube-proxy's
// iptables mode (and nodenet's) walk one nat rule per Service port for
// the first packet of every connection, nftables' verdict maps and ebpf's
// hash maps do not. TCP_CRR through a ClusterIP is where that shows.
const (
	fillerNS      = "nodenet-bench-fillers"
	fillerPort    = 80
	fillerWorkers = 16
	// fillerQPS bounds the creating client: the kind API server and its
	// etcd share the machine's 2 cores with everything else.
	fillerQPS = 400
	// maxFillers leaves room in kind's Service network (a /16) for the
	// cluster's own Services.
	maxFillers = 60000
)

func fillerName(i int) string { return fmt.Sprintf("filler-%05d", i) }

// fillerObjects is the Service and its EndpointSlice for filler i: no
// selector, so the EndpointSlice controller leaves the slice alone, and
// the slice's managed-by label says who wrote it.
func fillerObjects(i int, endpointIP string, targetPort int32) (*v1.Service, *discoveryv1.EndpointSlice) {
	name := fillerName(i)
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fillerNS},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeClusterIP,
			Ports: []v1.ServicePort{{Name: "tcp", Port: fillerPort, TargetPort: intstr.FromInt32(targetPort), Protocol: v1.ProtocolTCP}},
		},
	}
	portName, proto, ready := "tcp", v1.ProtocolTCP, true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fillerNS, Labels: map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   "nodenet-bench",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{endpointIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &targetPort, Protocol: &proto}},
	}
	return svc, slice
}

// createFillers creates n filler Services and their slices (objects that
// already exist are kept: a rerun on the same cluster adds only what is
// missing).
func (k *kcluster) createFillers(ctx context.Context, n int) error {
	return k.p.step(ctx, fmt.Sprintf("%d filler Services (one endpoint each)", n), func(ctx context.Context) error {
		cfg, err := clientcmd.BuildConfigFromFlags("", k.kubeconfig)
		if err != nil {
			return fmt.Errorf("kubeconfig: %w", err)
		}
		cfg.QPS, cfg.Burst = fillerQPS, fillerQPS
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		ip, err := k.kubectl(ctx, "-n", checkNS, "get", "pod", "echo-a", "-o", "jsonpath={.status.podIP}")
		if err != nil {
			return err
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fillerNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", fillerNS, err)
		}
		next := make(chan int)
		errs := make(chan error, fillerWorkers)
		var wg sync.WaitGroup
		for range fillerWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if err := createFiller(ctx, cs, i, ip); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		start := time.Now()
		var failed error
	feed:
		for i := range n {
			select {
			case next <- i:
			case failed = <-errs:
				break feed
			}
			if i > 0 && i%2000 == 0 {
				k.p.note("%d of %d filler Services created (%.0f/s)", i, n, float64(i)/time.Since(start).Seconds())
			}
		}
		close(next)
		wg.Wait()
		close(errs)
		for err := range errs {
			failed = errors.Join(failed, err)
		}
		return failed
	})
}

func createFiller(ctx context.Context, cs kubernetes.Interface, i int, endpointIP string) error {
	svc, slice := fillerObjects(i, endpointIP, 9000)
	if _, err := cs.CoreV1().Services(fillerNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("service %s: %w", svc.Name, err)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(fillerNS).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("endpointslice %s: %w", slice.Name, err)
	}
	return nil
}

// waitFillers waits until the data plane serves the first, middle and last
// filler Service from a pod: a figure measured while the proxy is still
// programming them would be neither scale.
func (k *kcluster) waitFillers(ctx context.Context, n int, plane string) error {
	return k.p.step(ctx, fmt.Sprintf("%d filler Services programmed (%s)", n, plane), func(ctx context.Context) error {
		for _, i := range []int{0, n / 2, n - 1} {
			cip, err := k.kubectl(ctx, "-n", fillerNS, "get", "svc", fillerName(i), "-o", "jsonpath={.spec.clusterIP}")
			if err != nil {
				return err
			}
			target := fmt.Sprintf("tcp://%s:%d", cip, fillerPort)
			deadline := time.Now().Add(10 * time.Minute)
			for {
				out, err := k.kubectl(ctx, "-n", checkNS, "exec", "client", "--", daemonset.NodenetPath, "echo", "--client", target, "--message", "filler")
				if err == nil && strings.Contains(out, "echo-a") {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%s (%s) not served after 10 minutes: %q %v", fillerName(i), target, out, err)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(2 * time.Second):
				}
			}
		}
		return nil
	})
}
