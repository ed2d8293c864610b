package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodenet/nodenet/cluster"
)

const (
	workloadNS    = "chaos"
	serviceName   = "echo"
	clientPrefix  = "client-"
	loadContainer = "load"
	echoPerNode   = 2
)

var echoLabels = map[string]string{"app": "echo"}

// Load is the load the two client pods generate together (each runs half).
type Load struct {
	Rate    int // new connections per second to each target (ClusterIP, NodePort)
	Long    int // long-lived connections
	UDPRate int // UDP requests per second
}

// workload is what the suite deploys: echo pods on every node behind a
// NodePort Service, and loadgen clients on the first two nodes.
type workload struct {
	cs        kubernetes.Interface
	nodes     []corev1.Node
	clusterIP string
	nodePort  int32
}

func pinned(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeName = node
	return p
}

// drainFor is how long a deleted echo pod goes on serving (its preStop
// hook) before its SIGTERM: the time every node's proxy needs to take the
// terminating endpoint out (informers, the EndpointSlice controller, a
// sync held back by --min-sync-period 1s), as a server behind a Service
// in production is given. Without it a deleted pod stops answering at
// once and the load fails against it until the proxies catch up: the
// figure would measure the workload, not the network.
const drainFor = 2 * time.Second

// draining gives an echo pod the preStop sleep of drainFor and a grace
// period that leaves its SIGTERM time after it.
func draining(p *corev1.Pod) *corev1.Pod {
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Sleep: &corev1.SleepAction{Seconds: int64(drainFor.Seconds())}}}
	}
	p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(drainFor.Seconds()) + 2)
	return p
}

func deployWorkload(ctx context.Context, cs kubernetes.Interface, nodes []corev1.Node, load Load) (*workload, error) {
	w := &workload{cs: cs, nodes: nodes}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	for i, n := range nodes {
		if err := createEchoPods(ctx, cs, n.Name, i == len(nodes)-1); err != nil {
			return nil, err
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: workloadNS, Name: serviceName}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Selector: echoLabels,
		Ports: []corev1.ServicePort{
			{Name: "tcp", Port: cluster.EchoTCPPort, TargetPort: intstr.FromString("tcp")},
			{Name: "udp", Port: cluster.EchoUDPPort, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("udp")},
		}}}
	s, err := cs.CoreV1().Services(workloadNS).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create service: %w", err)
	}
	w.clusterIP = s.Spec.ClusterIP
	for _, p := range s.Spec.Ports {
		if p.Name == "tcp" {
			w.nodePort = p.NodePort
		}
	}
	echoes := len(nodes) * echoPerNode
	if _, err := cluster.WaitPodsReady(ctx, cs, workloadNS, "app=echo", echoes, 3*time.Minute); err != nil {
		return nil, err
	}
	if _, err := cluster.WaitEndpoints(ctx, cs, workloadNS, serviceName, echoes, time.Minute); err != nil {
		return nil, err
	}
	// Client 1 runs on node-1 and opens its NodePort connections to
	// node-2, client 2 on node-2 to node-1: the faulted node (node-1)
	// serves the second client's NodePort traffic and the first client's
	// ClusterIP traffic.
	for i := 0; i < 2 && i < len(nodes); i++ {
		other := nodes[(i+1)%2]
		p := w.clientPod(clientPrefix+strconv.Itoa(i+1), nodes[i].Name, internalIP(other), load)
		if _, err := cs.CoreV1().Pods(workloadNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create client pod: %w", err)
		}
	}
	if _, err := cluster.WaitPodsReady(ctx, cs, workloadNS, "app=chaos-client", min(2, len(nodes)), 2*time.Minute); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *workload) clientPod(name, node, nodePortIP string, load Load) *corev1.Pod {
	cip := net.JoinHostPort(w.clusterIP, strconv.Itoa(cluster.EchoTCPPort))
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: workloadNS, Name: name, Labels: map[string]string{"app": "chaos-client"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptrTo[int64](2),
			Containers: []corev1.Container{{
				Name: loadContainer, Image: "nodenet/loadgen",
				Command: []string{"nodenet", "loadgen"},
				Args: []string{
					"--new", "clusterip=" + cip,
					"--new", "nodeport=" + net.JoinHostPort(nodePortIP, strconv.Itoa(int(w.nodePort))),
					"--rate", strconv.Itoa(max(1, load.Rate/2)),
					"--long-target", cip, "--long", strconv.Itoa(max(1, load.Long/2)),
					"--udp-target", net.JoinHostPort(w.clusterIP, strconv.Itoa(cluster.EchoUDPPort)),
					"--udp-rate", strconv.Itoa(max(1, load.UDPRate/2)),
				},
			}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

func internalIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// evictAfter is how long the echo pods of the node the link-down fault
// cuts off tolerate the node's unreachable taint: short, so that their
// eviction (endpoints terminating, then removed) shows within the cut,
// where the API server's default (300 s) would outlast it.
const evictAfter = 5 * time.Second

// createEchoPods creates the echo pods of a node; cutOff: the node the
// link-down fault cuts off, whose pods tolerate its absence evictAfter.
func createEchoPods(ctx context.Context, cs kubernetes.Interface, node string, cutOff bool) error {
	for k := 1; k <= echoPerNode; k++ {
		p := draining(pinned(cluster.EchoPod(workloadNS, fmt.Sprintf("echo-%s-%d", node, k), echoLabels), node))
		if cutOff {
			secs := int64(evictAfter.Seconds())
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{
				Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs,
			})
		}
		if _, err := cs.CoreV1().Pods(workloadNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create echo pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// endpointCounts are the Service's endpoints by condition.
type endpointCounts struct{ ready, terminating, all int }

func countEndpoints(ctx context.Context, cs kubernetes.Interface) (endpointCounts, error) {
	slices, err := cs.DiscoveryV1().EndpointSlices(workloadNS).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + serviceName})
	if err != nil {
		return endpointCounts{}, err
	}
	var c endpointCounts
	for _, sl := range slices.Items {
		for _, ep := range sl.Endpoints {
			c.all++
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				c.ready++
			}
			if ep.Conditions.Terminating != nil && *ep.Conditions.Terminating {
				c.terminating++
			}
		}
	}
	return c, nil
}

// readyEndpoints counts the Service's ready endpoints.
func readyEndpoints(ctx context.Context, cs kubernetes.Interface) (int, error) {
	c, err := countEndpoints(ctx, cs)
	return c.ready, err
}

// sortNodes orders nodes by name: node-1 is the faulted one.
func sortNodes(nodes []corev1.Node) {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
}
