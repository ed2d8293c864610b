package cluster

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// Ports the echo pods serve.
const (
	EchoTCPPort  = 9000
	EchoUDPPort  = 9001
	EchoHTTPPort = 8080
)

// netnsAnnotation is where the agent records a pod's namespace (the same
// key as node.NetnsAnnotation; cluster imports no daemon package).
const netnsAnnotation = "nodenet.io/netns"

// WaitNodesReady waits until n nodes are Ready with distinct podCIDRs.
func WaitNodesReady(ctx context.Context, cs kubernetes.Interface, n int, timeout time.Duration) ([]corev1.Node, error) {
	deadline := time.Now().Add(timeout)
	for {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			ready, cidrs := 0, map[string]bool{}
			for _, nd := range nodes.Items {
				if nodeReady(&nd) && nd.Spec.PodCIDR != "" {
					ready++
					cidrs[nd.Spec.PodCIDR] = true
				}
			}
			if ready >= n && len(cidrs) == ready {
				return nodes.Items, nil
			}
		}
		if err := sleepUntil(ctx, deadline, fmt.Sprintf("%d Ready nodes with podCIDRs", n)); err != nil {
			return nil, err
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// EchoPod is a pod running `nodenet echo` with a TCP readiness probe.
func EchoPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptrTo[int64](2),
			Containers: []corev1.Container{{
				Name: "echo", Image: "nodenet/echo",
				Command: []string{"nodenet", "echo"},
				Args:    []string{"--tcp", fmt.Sprintf(":%d", EchoTCPPort), "--udp", fmt.Sprintf(":%d", EchoUDPPort), "--http", fmt.Sprintf(":%d", EchoHTTPPort)},
				Ports: []corev1.ContainerPort{
					{Name: "tcp", ContainerPort: EchoTCPPort}, {Name: "udp", ContainerPort: EchoUDPPort, Protocol: corev1.ProtocolUDP},
					{Name: "http", ContainerPort: EchoHTTPPort}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("tcp")}}, PeriodSeconds: 1},
			}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// WaitPodsReady waits until every pod matching selector in ns is Running
// and Ready, and returns them sorted by name.
func WaitPodsReady(ctx context.Context, cs kubernetes.Interface, ns, selector string, n int, timeout time.Duration) ([]corev1.Pod, error) {
	deadline := time.Now().Add(timeout)
	for {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			ok := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning && podReady(&p) && p.Status.PodIP != "" && p.Annotations[netnsAnnotation] != "" {
					ok++
				}
			}
			if ok == n && len(pods.Items) == n {
				sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
				return pods.Items, nil
			}
		}
		if err := sleepUntil(ctx, deadline, fmt.Sprintf("%d pods Running and Ready in %s", n, ns)); err != nil {
			return nil, err
		}
	}
}

// Probe runs `nodenet echo --client target` inside a pod's namespace and
// returns the reply.
func Probe(ctx context.Context, binary string, from *corev1.Pod, target string) (string, error) {
	return probeIn(ctx, binary, from.Annotations[netnsAnnotation], from.Name, target)
}

// probeIn runs the echo client in the named network namespace, and in the
// node cgroup of the pods there (netnsCgroup), as a process of that pod
// would: a node's ebpf proxy load-balances only its own cgroup's sockets.
func probeIn(ctx context.Context, binary, netns, who, target string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "ip", "netns", "exec", netns, binary, "echo", "--client", target, "--message", "hello from "+who)
	if cg := netnsCgroup(netns); cg != "" {
		f, err := os.Open(cg)
		if err != nil {
			return "", fmt.Errorf("%s -> %s: open the pod's cgroup: %w", who, target, err)
		}
		defer f.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s -> %s: %w: %s", who, target, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// probeUntil retries probe for up to 10s: the proxies and the vpc router
// need a moment after an EndpointSlice or a LoadBalancer IP lands.
func probeUntil(ctx context.Context, probe func() (string, error)) (reply string, err error) {
	for try := 0; try < 20; try++ {
		if reply, err = probe(); err == nil {
			return reply, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return reply, err
}

// DemoOptions configure RunDemo.
type DemoOptions struct {
	Binary     string // the nodenet binary (for the clients)
	Kubeconfig string // admin kubeconfig (printed for the user)
	Nodes      int
	Pods       int
	// ExternalNetns plays the client outside the cluster (the vpc
	// namespace, which also is the router of the node network).
	ExternalNetns string
	// Backend is flanneld's backend (what cross-node traffic is checked
	// to go through); NodeNetns maps node names to their namespaces.
	Backend   string
	NodeNetns map[string]string
	// HostRouting is flanneld's --host-routing: with ebpf, cross-node pod
	// traffic is checked not to go through the nodes' IP forwarding.
	HostRouting string
	Out         io.Writer
	// Hints, when set, gets the "try it yourself" commands: only worth
	// printing for a cluster that stays up.
	Hints io.Writer
}

// RunDemo deploys echo pods and a Service and checks pod-to-pod traffic
// between every pair and Service traffic from every pod. It returns the
// number of failed checks.
func RunDemo(ctx context.Context, cs kubernetes.Interface, o DemoOptions) (int, error) {
	out := o.Out
	fails := 0
	check := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if !ok {
			mark, fails = "FAIL", fails+1
		}
		fmt.Fprintf(out, "  [%s] %s\n", mark, fmt.Sprintf(format, args...))
	}
	nodes, err := WaitNodesReady(ctx, cs, o.Nodes, 120*time.Second)
	if err != nil {
		return 1, err
	}
	fmt.Fprintln(out, "\n== nodes")
	for _, n := range nodes {
		fmt.Fprintf(out, "  %-8s Ready  podCIDR %-14s zone %s\n", n.Name, n.Spec.PodCIDR, n.Labels["topology.kubernetes.io/zone"])
	}
	const ns = "demo"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 1, err
	}
	labels := map[string]string{"app": "echo"}
	for i := 1; i <= o.Pods; i++ {
		p := EchoPod(ns, fmt.Sprintf("echo-%d", i), labels)
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return 1, fmt.Errorf("create pod: %w", err)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"}, Spec: corev1.ServiceSpec{
		Type:     corev1.ServiceTypeLoadBalancer,
		Selector: labels,
		Ports: []corev1.ServicePort{
			{Name: "tcp", Port: 9000, TargetPort: intstr.FromString("tcp")},
			{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
	}}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 1, fmt.Errorf("create service: %w", err)
	}
	fmt.Fprintf(out, "\n== deployed %d echo pods (command: nodenet echo) and Service demo/echo; waiting for Ready\n", o.Pods)
	pods, err := WaitPodsReady(ctx, cs, ns, "app=echo", o.Pods, 120*time.Second)
	if err != nil {
		return 1, err
	}
	byNode := map[string]int{}
	for _, p := range pods {
		byNode[p.Spec.NodeName]++
		fmt.Fprintf(out, "  %-8s %-8s %-12s netns %s\n", p.Name, p.Spec.NodeName, p.Status.PodIP, p.Annotations[netnsAnnotation])
	}
	check(len(byNode) > 1 || o.Nodes == 1, "pods spread over %d nodes", len(byNode))
	fails += CheckPodSubnets(pods, nodes, check)

	fmt.Fprintln(out, "\n== pod-to-pod (TCP, every pair; UDP and HTTP from the first pod)")
	for _, from := range pods {
		for _, to := range pods {
			if from.Name == to.Name {
				continue
			}
			reply, err := Probe(ctx, o.Binary, &from, fmt.Sprintf("tcp://%s:%d", to.Status.PodIP, EchoTCPPort))
			check(err == nil && strings.HasPrefix(reply, to.Name+":"), "%s (%s) -> %s (%s): %s", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, orErr(reply, err))
		}
	}
	first := pods[0]
	for _, to := range pods[1:] {
		reply, err := Probe(ctx, o.Binary, &first, fmt.Sprintf("udp://%s:%d", to.Status.PodIP, EchoUDPPort))
		check(err == nil && strings.HasPrefix(reply, to.Name+":"), "udp  %s -> %s: %s", first.Name, to.Name, orErr(reply, err))
		reply, err = Probe(ctx, o.Binary, &first, fmt.Sprintf("http://%s:%d/", to.Status.PodIP, EchoHTTPPort))
		check(err == nil && reply == to.Name, "http %s -> %s: %s", first.Name, to.Name, orErr(reply, err))
	}

	checkTrafficKinds(ctx, o, pods, nodes, check)

	fmt.Fprintln(out, "\n== Service demo/echo (LoadBalancer: ClusterIP from every pod, the NodePort on every node, then the LoadBalancer IP)")
	s, err := WaitEndpoints(ctx, cs, ns, "echo", o.Pods, 60*time.Second)
	check(err == nil, "EndpointSlices list %d ready endpoints", o.Pods)
	if s != nil {
		fmt.Fprintf(out, "  ClusterIP %s\n", s.Spec.ClusterIP)
		for _, from := range pods {
			reply, err := probeUntil(ctx, func() (string, error) {
				return Probe(ctx, o.Binary, &from, fmt.Sprintf("http://%s:80/", s.Spec.ClusterIP))
			})
			check(err == nil && strings.HasPrefix(reply, "echo-"), "%s -> http://%s (service) answered by %s", from.Name, s.Spec.ClusterIP, orErr(reply, err))
		}
	}
	var lbIP string
	if s != nil {
		checkNodePorts(ctx, o.Binary, &first, s, nodes, check)
		lbIP = checkLoadBalancer(ctx, cs, o, &first, check)
	}
	if h := o.Hints; h != nil {
		fmt.Fprintf(h, "\n== try it yourself\n")
		fmt.Fprintf(h, "  export KUBECONFIG=%s\n", o.Kubeconfig)
		fmt.Fprintf(h, "  kubectl get nodes,pods,svc,endpointslices -A -o wide\n")
		fmt.Fprintf(h, "  sudo ip netns exec %s %s echo --client http://%s:%d/\n", first.Annotations[netnsAnnotation], o.Binary, pods[len(pods)-1].Status.PodIP, EchoHTTPPort)
		if s != nil {
			fmt.Fprintf(h, "  sudo ip netns exec %s %s echo --client http://%s/\n", first.Annotations[netnsAnnotation], o.Binary, s.Spec.ClusterIP)
		}
		if lbIP != "" && o.ExternalNetns != "" {
			fmt.Fprintf(h, "  sudo ip netns exec %s %s echo --client http://%s/   # the LoadBalancer, from outside the nodes\n", o.ExternalNetns, o.Binary, lbIP)
		}
		fmt.Fprintf(h, "  kubectl -n demo delete pod echo-1\n")
	}
	return fails, nil
}

// checkNodePorts reaches the Service's HTTP NodePort on every node's
// InternalIP from a pod: traffic that enters each node from its network,
// is DNATed by that node's proxy and may leave again for another node.
func checkNodePorts(ctx context.Context, binary string, from *corev1.Pod, s *corev1.Service, nodes []corev1.Node, check func(bool, string, ...any)) {
	var port int32
	for _, p := range s.Spec.Ports {
		if p.Name == "http" {
			port = p.NodePort
		}
	}
	if port == 0 {
		check(false, "service %s has an http NodePort", s.Name)
		return
	}
	for _, n := range nodes {
		target := fmt.Sprintf("http://%s:%d/", internalIP(n), port)
		reply, err := probeUntil(ctx, func() (string, error) { return Probe(ctx, binary, from, target) })
		check(err == nil && strings.HasPrefix(reply, "echo-"), "%s -> %s (NodePort on %s) answered by %s", from.Name, target, n.Name, orErr(reply, err))
	}
}

// checkLoadBalancer waits for the Service's LoadBalancer IP and reaches it
// from the external client (through the vpc router's route to a node) and
// from a pod (captured by the pod's node). It returns the IP.
func checkLoadBalancer(ctx context.Context, cs kubernetes.Interface, o DemoOptions, from *corev1.Pod, check func(bool, string, ...any)) string {
	ip, err := waitLoadBalancerIP(ctx, cs, from.Namespace, "echo", 60*time.Second)
	check(err == nil, "LoadBalancer IP %s assigned", orErr(ip, err))
	if err != nil {
		return ""
	}
	target := fmt.Sprintf("http://%s:80/", ip)
	if o.ExternalNetns != "" {
		reply, err := probeUntil(ctx, func() (string, error) { return probeIn(ctx, o.Binary, o.ExternalNetns, "outside", target) })
		check(err == nil && strings.HasPrefix(reply, "echo-"), "external client (netns %s) -> %s answered by %s; vpc router: %s", o.ExternalNetns, target, orErr(reply, err), routeTo(ctx, o.ExternalNetns, ip))
	}
	reply, err := probeUntil(ctx, func() (string, error) { return Probe(ctx, o.Binary, from, target) })
	check(err == nil && strings.HasPrefix(reply, "echo-"), "%s -> %s (LoadBalancer) answered by %s", from.Name, target, orErr(reply, err))
	return ip
}

func waitLoadBalancerIP(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(s.Status.LoadBalancer.Ingress) > 0 && s.Status.LoadBalancer.Ingress[0].IP != "" {
			return s.Status.LoadBalancer.Ingress[0].IP, nil
		}
		if err := sleepUntil(ctx, deadline, "a LoadBalancer IP for "+ns+"/"+name); err != nil {
			return "", err
		}
	}
}

func orErr(s string, err error) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// CheckPodSubnets checks every pod's IP is inside its node's podCIDR.
func CheckPodSubnets(pods []corev1.Pod, nodes []corev1.Node, check func(bool, string, ...any)) int {
	cidr := map[string]string{}
	for _, n := range nodes {
		cidr[n.Name] = n.Spec.PodCIDR
	}
	for _, p := range pods {
		c := cidr[p.Spec.NodeName]
		pfx, err1 := netip.ParsePrefix(c)
		ip, err2 := netip.ParseAddr(p.Status.PodIP)
		in := err1 == nil && err2 == nil && pfx.Contains(ip)
		check(in, "%s IP %s in %s's podCIDR %s", p.Name, p.Status.PodIP, p.Spec.NodeName, c)
	}
	return 0
}

// WaitEndpoints waits for n ready endpoints behind a Service.
func WaitEndpoints(ctx context.Context, cs kubernetes.Interface, ns, name string, n int, timeout time.Duration) (*corev1.Service, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := cs.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			slices, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + name})
			if err == nil {
				ready := 0
				for _, sl := range slices.Items {
					for _, ep := range sl.Endpoints {
						if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
							ready++
						}
					}
				}
				if ready >= n {
					return s, nil
				}
			}
		}
		if err := sleepUntil(ctx, deadline, "endpoints of "+ns+"/"+name); err != nil {
			return nil, err
		}
	}
}

// Status prints nodes, pods and services of the cluster in dir.
func Status(ctx context.Context, dir string, out io.Writer) error {
	st, err := ReadState(dir)
	if err != nil {
		return fmt.Errorf("no cluster in %s: %w", dir, err)
	}
	cs, err := Client(filepath.Join(dir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	running := "running"
	if !(Owner{PID: st.PID, StartTicks: st.StartTicks}).alive() {
		running = "not running: `nodenet down` removes what it left"
	}
	fmt.Fprintf(out, "cluster %q (namespaces %s*, up pid %d %s, API https://127.0.0.1:%d)\n", st.Name, Prefix(st.Name), st.PID, running, st.APIPort)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("API server not answering: %w", err)
	}
	fmt.Fprintln(out, "NODE      READY  INTERNAL-IP     POD-CIDR")
	for _, n := range nodes.Items {
		fmt.Fprintf(out, "%-9s %-6v %-15s %s\n", n.Name, nodeReady(&n), internalIP(n), n.Spec.PodCIDR)
	}
	// The vpc router's table: with --backend alloc one route per node
	// podCIDR (cloud routes), and one per LoadBalancer IP (lbroutes).
	fmt.Fprintf(out, "\nVPC ROUTER (namespace %s, main table)\n", VPCNetns(st.Name))
	if b, err := exec.CommandContext(ctx, "ip", "-n", VPCNetns(st.Name), "-4", "route", "show").Output(); err != nil {
		fmt.Fprintf(out, "  (not readable: %v)\n", err)
	} else {
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			fmt.Fprintf(out, "  %s\n", l)
		}
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nPOD                            NODE      PHASE      READY  IP")
	for _, p := range pods.Items {
		fmt.Fprintf(out, "%-30s %-9s %-10s %-6v %s\n", p.Namespace+"/"+p.Name, p.Spec.NodeName, p.Status.Phase, podReady(&p), p.Status.PodIP)
	}
	svcs, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nSERVICE                        TYPE         CLUSTER-IP      EXTERNAL-IP     PORTS")
	for _, s := range svcs.Items {
		var ports []string
		for _, p := range s.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
		ext := "<none>"
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			ext = "<pending>"
		}
		var ips []string
		for _, ing := range s.Status.LoadBalancer.Ingress {
			ips = append(ips, ing.IP)
		}
		if len(ips) > 0 {
			ext = strings.Join(ips, ",")
		}
		fmt.Fprintf(out, "%-30s %-12s %-15s %-15s %s\n", s.Namespace+"/"+s.Name, s.Spec.Type, s.Spec.ClusterIP, ext, strings.Join(ports, ","))
	}
	return nil
}
