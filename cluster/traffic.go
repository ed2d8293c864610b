package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The four kinds of pod traffic the product's source material names
// (集群网络详解): inside a pod over loopback; pod → pod on the same node,
// through cni0; pod → pod across nodes, through the backend (host-gw and
// vxlan: node to node; alloc: node → vpc router → node, over the cloud
// routes); pod → an address that is no pod's, masqueraded by flanneld's
// --ip-masq to the node's address. The last two are told apart by what
// the server sees as the client: `nodenet echo`'s /clientip.

const (
	// outsideEchoPort is where the demo's non-pod server listens, on the
	// vpc router's node-network address: a host on the VPC that is no pod.
	outsideEchoPort = 8099
	clientIPPath    = "/clientip" // echo.ClientIPPath (node/echo)
)

// startOutsideEcho runs `nodenet echo` in the vpc namespace, HTTP only,
// until the returned stop is called.
func startOutsideEcho(ctx context.Context, binary, vpcNetns string) (addr string, stop func(), err error) {
	addr = net.JoinHostPort(apiIP, strconv.Itoa(outsideEchoPort))
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, "ip", "netns", "exec", vpcNetns, binary, "echo", "--name", "vpc-host", "--tcp", "", "--udp", "", "--http", addr)
	if err := cmd.Start(); err != nil {
		cancel()
		return "", nil, fmt.Errorf("start the outside echo server: %w", err)
	}
	stop = func() { cancel(); _ = cmd.Wait() }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := probeIn(ctx, binary, vpcNetns, "vpc", "http://"+addr+"/"); err == nil {
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("the outside echo server on %s does not answer", addr)
		}
	}
}

// forwarded is the vpc router's IP ForwDatagrams counter.
func forwarded(ctx context.Context, netns string) (int64, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", netns, "cat", "/proc/net/snmp").Output()
	if err != nil {
		return 0, fmt.Errorf("read /proc/net/snmp in %s: %w", netns, err)
	}
	var head []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Ip:" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		for i, name := range head {
			if name == "ForwDatagrams" && i < len(f) {
				return strconv.ParseInt(f[i], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no ForwDatagrams in %s's /proc/net/snmp", netns)
}

// forwardedSum adds up forwarded for several namespaces.
func forwardedSum(ctx context.Context, netns []string) (int64, error) {
	var sum int64
	for _, ns := range netns {
		if ns == "" {
			return 0, errors.New("a node's namespace is unknown")
		}
		n, err := forwarded(ctx, ns)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// routeTo is netns's route for ip as `ip route get` shows it ("10.244.2.2
// via 172.30.0.12 dev vpc0 …"): which node the vpc router sends a pod
// address or a LoadBalancer IP to.
func routeTo(ctx context.Context, netns, ip string) string {
	out, err := exec.CommandContext(ctx, "ip", "-n", netns, "route", "get", ip).Output()
	if err != nil {
		return "no route to " + ip
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.Join(strings.Fields(line), " ")
}

func hostOf(hostPort string) string {
	h, _, err := net.SplitHostPort(strings.TrimSpace(hostPort))
	if err != nil {
		return hostPort
	}
	return h
}

// checkTrafficKinds checks the four kinds of pod traffic.
func checkTrafficKinds(ctx context.Context, o DemoOptions, pods []corev1.Pod, nodes []corev1.Node, check func(bool, string, ...any)) {
	fmt.Fprintf(o.Out, "\n== the four kinds of pod traffic (backend %s)\n", o.Backend)
	first := pods[0]
	reply, err := probeIn(ctx, o.Binary, first.Annotations[netnsAnnotation], first.Name, fmt.Sprintf("tcp://127.0.0.1:%d", EchoTCPPort))
	check(err == nil && strings.HasPrefix(reply, first.Name+":"), "1. inside %s over loopback (127.0.0.1:%d): %s", first.Name, EchoTCPPort, orErr(reply, err))

	var same, other *corev1.Pod
	for i := range pods[1:] {
		p := &pods[i+1]
		if p.Spec.NodeName == first.Spec.NodeName && same == nil {
			same = p
		}
		if p.Spec.NodeName != first.Spec.NodeName && other == nil {
			other = p
		}
	}
	clientIP := func(to string) (string, error) {
		r, err := Probe(ctx, o.Binary, &first, "http://"+to+clientIPPath)
		return hostOf(r), err
	}
	if same != nil {
		seen, err := clientIP(net.JoinHostPort(same.Status.PodIP, strconv.Itoa(EchoHTTPPort)))
		check(err == nil && seen == first.Status.PodIP, "2. %s -> %s on the same node %s (cni0): the server sees %s (the pod's own address %s)", first.Name, same.Name, first.Spec.NodeName, orErr(seen, err), first.Status.PodIP)
	}
	if other != nil && o.ExternalNetns != "" {
		ends := []string{o.NodeNetns[first.Spec.NodeName], o.NodeNetns[other.Spec.NodeName]}
		nodesBefore, errNB := forwardedSum(ctx, ends)
		before, errB := forwarded(ctx, o.ExternalNetns)
		seen, err := clientIP(net.JoinHostPort(other.Status.PodIP, strconv.Itoa(EchoHTTPPort)))
		after, errA := forwarded(ctx, o.ExternalNetns)
		nodesAfter, errNA := forwardedSum(ctx, ends)
		routed, nodesRouted := after-before, nodesAfter-nodesBefore
		check(err == nil && seen == first.Status.PodIP, "3. %s (%s) -> %s (%s) across nodes: the server sees %s (the pod's own address)", first.Name, first.Spec.NodeName, other.Name, other.Spec.NodeName, orErr(seen, err))
		if o.Backend == "alloc" {
			check(errB == nil && errA == nil && routed > 0, "   through the vpc router: it forwarded %d packets during the exchange (%s)", routed, routeTo(ctx, o.ExternalNetns, other.Status.PodIP))
			checkNoPeerRoutes(ctx, o, nodes, check)
		} else {
			fmt.Fprintf(o.Out, "         node to node over %s: the vpc router forwarded %d packets\n", o.Backend, routed)
		}
		if o.HostRouting == "ebpf" && o.Backend != "alloc" {
			err := errors.Join(errNB, errNA)
			check(err == nil && nodesRouted == 0, "   eBPF host routing: the two nodes' IP stacks forwarded %s packets of the exchange", orErr(strconv.FormatInt(nodesRouted, 10), err))
		} else {
			fmt.Fprintf(o.Out, "         the two nodes' IP stacks forwarded %d packets of the exchange (host routing %s)\n", nodesRouted, cmpOr(o.HostRouting, "kernel"))
		}
	}
	if o.ExternalNetns != "" {
		addr, stop, err := startOutsideEcho(ctx, o.Binary, o.ExternalNetns)
		if err != nil {
			check(false, "4. pod -> non-pod address: %v", err)
			return
		}
		defer stop()
		nodeIP := ""
		for _, n := range nodes {
			if n.Name == first.Spec.NodeName {
				nodeIP = internalIP(n)
			}
		}
		seen, err := clientIP(addr)
		check(err == nil && seen == nodeIP, "4. %s -> %s (a host on the VPC, no pod): the server sees %s, %s's address %s (masqueraded by flanneld --ip-masq)", first.Name, addr, orErr(seen, err), first.Spec.NodeName, nodeIP)
	}
}

// checkNoPeerRoutes: with alloc, no node routes another node's podCIDR;
// the default route to the vpc router carries that traffic.
func checkNoPeerRoutes(ctx context.Context, o DemoOptions, nodes []corev1.Node, check func(bool, string, ...any)) {
	for _, n := range nodes {
		netns := o.NodeNetns[n.Name]
		if netns == "" {
			continue
		}
		out, err := exec.CommandContext(ctx, "ip", "-n", netns, "-4", "route", "show").Output()
		var peer []string
		for _, m := range nodes {
			if m.Name != n.Name && m.Spec.PodCIDR != "" && strings.Contains(string(out), m.Spec.PodCIDR) {
				peer = append(peer, m.Spec.PodCIDR)
			}
		}
		check(err == nil && len(peer) == 0, "   %s holds no route to another node's podCIDR %v", n.Name, peer)
	}
}

func internalIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
