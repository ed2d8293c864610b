package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/cluster"
	"github.com/nodenet/nodenet/daemonset/manifest"
)

// env is what faults act on: the cluster, its first node (the faulted
// one) and its vpc namespace.
type env struct {
	cs        kubernetes.Interface
	name      string // cluster name
	backend   string
	proxyMode string
	nodes     []corev1.Node
	short     bool
	dir       string // the cluster's state directory
	// timeout bounds how long a fault may take to be repaired before the
	// suite records it as not converged and goes on.
	timeout time.Duration
}

func (e *env) nodeNetns(i int) string { return cluster.NodeNetns(e.name, i) }
func (e *env) vpcNetns() string       { return cluster.VPCNetns(e.name) }

// Outcome is what one fault did, in time. Converge is computed later from
// Restored, Green and the load's last failure in the window.
type Outcome struct {
	Start    time.Time // the fault was injected
	Restored time.Time // its cause ended: the daemon runs again, churn stopped (= Start for a one-shot change)
	Green    time.Time // every check green again (zero: not within the timeout)
	Note     string
}

// Fault is one line of the report.
type Fault struct {
	Name string
	// Class selects the targets the line is held to.
	Class  targetClass
	Inject func(ctx context.Context, e *env) (Outcome, error)
	// Applies is false where the fault has no meaning (an FDB entry under
	// host-gw); nil means always.
	Applies func(e *env) bool
}

type targetClass int

const (
	classOther      targetClass = iota
	classDaemonKill             // 0 broken established, converge < 2 s after back
	classDataDaemon             // and 0 failed new connections (proxy, flanneld)
)

// killFault is kill -9 of `nodenet sub` in netns; healthy says when the
// restarted daemon serves again.
func killFault(name, sub string, class targetClass, netns func(e *env) string, healthy func(ctx context.Context, e *env) bool) Fault {
	return Fault{Name: name, Class: class, Inject: func(ctx context.Context, e *env) (Outcome, error) {
		ns := netns(e)
		o := Outcome{Start: time.Now()}
		old, err := kill9(ns, sub)
		if err != nil {
			return o, err
		}
		o.Restored = waitFor(ctx, e.timeout, func() bool {
			pid, err := daemonPID(ns, sub)
			return err == nil && pid != 0 && pid != old
		})
		if o.Restored.IsZero() {
			return o, fmt.Errorf("nodenet %s did not come back within %s", sub, e.timeout)
		}
		o.Green = waitFor(ctx, e.timeout, func() bool { return healthy(ctx, e) })
		pid, _ := daemonPID(ns, sub)
		o.Note = fmt.Sprintf("pid %d → %d", old, pid)
		return o, nil
	}}
}

func node1(e *env) string { return e.nodeNetns(1) }
func vpc(e *env) string   { return e.vpcNetns() }

// nodeGrace is the cluster's node monitor grace period (`nodenet up
// --node-monitor-grace-period`) and linkCut how long the link-down fault
// cuts a node off: longer than the grace, so that the node goes NotReady
// and its endpoints leave the Service while it is away (the controller
// measures from the last renewal it saw, up to one 10 s renewal before
// the cut). The grace stays well above the API server fault's 10 s
// freeze, during which no node can renew its lease.
const (
	nodeGrace = 25 * time.Second
	linkCut   = 40 * time.Second
)

// Faults in the order the suite runs them; short selects the CI subset.
func faults(short bool, churnRate int) []Fault {
	proxyHealthy := func(_ context.Context, e *env) bool {
		return httpOK(e.nodeNetns(1), net.JoinHostPort("127.0.0.1", strconv.Itoa(manifest.ProxyHealthPort)), "/healthz")
	}
	flanneldHealthy := func(_ context.Context, e *env) bool {
		return httpOK(e.nodeNetns(1), net.JoinHostPort("127.0.0.1", strconv.Itoa(manifest.FlanneldHealthPort)), "/healthz")
	}
	agentHealthy := func(_ context.Context, e *env) bool {
		return listening(e.nodeNetns(1), net.JoinHostPort(internalIP(e.nodes[0]), "10250"))
	}
	always := func(context.Context, *env) bool { return true }
	apiHealthy := func(ctx context.Context, e *env) bool { return apiReady(ctx, e.cs) }
	all := []Fault{
		killFault("kill -9 proxy (node-1)", "proxy", classDataDaemon, node1, proxyHealthy),
		killFault("kill -9 flanneld (node-1)", "flanneld", classDataDaemon, node1, flanneldHealthy),
		killFault("kill -9 agent (node-1)", "agent", classDaemonKill, node1, agentHealthy),
		killFault("kill -9 controller-manager", "controller-manager", classDaemonKill, vpc, always),
		killFault("kill -9 apiserver (embedded etcd)", "apiserver", classDaemonKill, vpc, apiHealthy),
		{Name: "proxy rules flushed (iptables -t nat -F NODENET-SERVICES, node-1)", Inject: flushProxyRules, Applies: func(e *env) bool { return e.proxyMode == "iptables" }},
		{Name: "proxy rules flushed (nft flush chain ip nodenet-proxy services, node-1)", Inject: flushNftProxyRules, Applies: func(e *env) bool { return e.proxyMode == "nftables" }},
		{Name: "flanneld route to node-2's podCIDR deleted (node-1)", Inject: deleteRoute},
		{Name: "VXLAN FDB entry of node-2 deleted (node-1)", Inject: deleteFDB, Applies: func(e *env) bool { return e.backend == "vxlan" }},
		{Name: "IPAM store full (tmpfs) during pod creation (node-3)", Inject: diskFull},
		{Name: "API server frozen 10 s, then killed (restart with an empty watch cache)", Class: classDaemonKill, Inject: apiserverGap(10*time.Second, 15*time.Second)},
		{Name: fmt.Sprintf("node-3 cut off from the node network for %s (vpc link down; grace period %s)", linkCut, nodeGrace), Inject: linkDown(linkCut)},
		{Name: "node-3 restarted (`nodenet node restart`: every process killed, namespaces removed, back with the same name)", Inject: nodeRestart},
		// Last: on a small machine the churn's pods take a while to go,
		// and the faults after it would measure that.
		{Name: fmt.Sprintf("endpoint churn: %d endpoints/s replaced", churnRate), Inject: churn(churnRate)},
	}
	if short {
		// CI: one daemon of each kind on the node, one hand repair, the
		// full store, a node restart (about 10 s), short churn.
		return []Fault{all[0], all[1], all[2], all[7], all[9], all[12], all[13]}
	}
	return all
}

// iptablesOf finds which iptables (nft or legacy backend) holds the
// proxy's NODENET-SERVICES rules in netns, and how many there are.
func iptablesOf(ctx context.Context, netns string) (string, int, error) {
	for _, bin := range []string{"iptables", "iptables-legacy"} {
		out, err := run(ctx, "ip", "netns", "exec", netns, bin+"-save", "-t", "nat")
		if err != nil {
			continue
		}
		if n := strings.Count(out, "-A NODENET-SERVICES "); n > 0 {
			return bin, n, nil
		}
	}
	return "", 0, fmt.Errorf("no NODENET-SERVICES rules in %s (is the proxy in iptables mode?)", netns)
}

func flushProxyRules(ctx context.Context, e *env) (Outcome, error) {
	ns := e.nodeNetns(1)
	bin, before, err := iptablesOf(ctx, ns)
	if err != nil {
		return Outcome{}, err
	}
	o := Outcome{Start: time.Now()}
	o.Restored = o.Start
	if _, err := run(ctx, "ip", "netns", "exec", ns, bin, "-t", "nat", "-F", "NODENET-SERVICES"); err != nil {
		return o, err
	}
	o.Green = waitFor(ctx, e.timeout, func() bool {
		_, n, err := iptablesOf(ctx, ns)
		return err == nil && n >= before
	})
	o.Note = fmt.Sprintf("%s: %d rules flushed", bin, before)
	return o, nil
}

// nftServicesRules counts the rules of the nftables proxy's services
// chain in netns.
func nftServicesRules(ctx context.Context, netns string) (int, error) {
	out, err := run(ctx, "ip", "netns", "exec", netns, "nft", "-a", "list", "chain", "ip", "nodenet-proxy", "services")
	if err != nil {
		return 0, err
	}
	return strings.Count(out, "# handle "), nil
}

func flushNftProxyRules(ctx context.Context, e *env) (Outcome, error) {
	ns := e.nodeNetns(1)
	before, err := nftServicesRules(ctx, ns)
	if err != nil || before == 0 {
		return Outcome{}, fmt.Errorf("no nftables services rules in %s (is the proxy in nftables mode?): %v", ns, err)
	}
	o := Outcome{Start: time.Now()}
	o.Restored = o.Start
	if _, err := run(ctx, "ip", "netns", "exec", ns, "nft", "flush", "chain", "ip", "nodenet-proxy", "services"); err != nil {
		return o, err
	}
	o.Green = waitFor(ctx, e.timeout, func() bool {
		n, err := nftServicesRules(ctx, ns)
		return err == nil && n >= before
	})
	o.Note = fmt.Sprintf("nft: %d rules flushed", before)
	return o, nil
}

func deleteRoute(ctx context.Context, e *env) (Outcome, error) {
	ns, cidr := e.nodeNetns(1), e.nodes[1].Spec.PodCIDR
	show := func() (string, error) { return run(ctx, "ip", "-n", ns, "-4", "route", "show", "exact", cidr) }
	route, err := show()
	if err != nil || strings.TrimSpace(route) == "" {
		return Outcome{}, fmt.Errorf("%s has no route to %s: %v", ns, cidr, err)
	}
	o := Outcome{Start: time.Now()}
	o.Restored = o.Start
	if _, err := run(ctx, "ip", "-n", ns, "route", "del", cidr); err != nil {
		return o, err
	}
	o.Green = waitFor(ctx, e.timeout, func() bool {
		r, err := show()
		return err == nil && strings.TrimSpace(r) != ""
	})
	o.Note = "route " + strings.TrimSpace(route)
	return o, nil
}

// vxlanDevice is flannel's VXLAN device (VNI 1).
const vxlanDevice = "flannel.1"

func deleteFDB(ctx context.Context, e *env) (Outcome, error) {
	ns, peer := e.nodeNetns(1), internalIP(e.nodes[1])
	find := func() string {
		out, err := run(ctx, "bridge", "-n", ns, "fdb", "show", "dev", vxlanDevice)
		if err != nil {
			return ""
		}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 2 && strings.Contains(l, "dst "+peer+" ") {
				return f[0]
			}
		}
		return ""
	}
	mac := find()
	if mac == "" {
		return Outcome{}, fmt.Errorf("%s: no FDB entry on %s for %s", ns, vxlanDevice, peer)
	}
	o := Outcome{Start: time.Now()}
	o.Restored = o.Start
	if _, err := run(ctx, "bridge", "-n", ns, "fdb", "del", mac, "dev", vxlanDevice, "dst", peer); err != nil {
		return o, err
	}
	o.Green = waitFor(ctx, e.timeout, func() bool { return find() == mac })
	o.Note = fmt.Sprintf("%s dst %s", mac, peer)
	return o, nil
}

// churn replaces rate endpoints a second behind the busy Service (the
// issue's 10): a new echo pod (with the Service's labels) is created every
// 1/rate s and the one created churnLife earlier deleted, each call in
// its own goroutine so a slow API server does not slow the rate down; the
// churn stops early when the API server starts failing calls (an
// overloaded machine). Green: every churn pod gone and the Service back
// to its stable endpoints.
func churn(rate int) func(ctx context.Context, e *env) (Outcome, error) {
	return func(ctx context.Context, e *env) (Outcome, error) { return churnAt(ctx, e, rate) }
}

func churnAt(ctx context.Context, e *env, rate int) (Outcome, error) {
	d := time.Minute
	if e.short {
		d = 10 * time.Second
	}
	// churnLife is how long a churn pod lives: long enough to start and
	// become a ready endpoint, so that endpoints, not only pods, churn.
	const churnLife = 3 * time.Second
	every := time.Second / time.Duration(rate)
	pods := e.cs.CoreV1().Pods(workloadNS)
	labels := map[string]string{"app": "echo", "churn": "yes"}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	call := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !apierrors.IsNotFound(err) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	o := Outcome{Start: time.Now()}
	lag := int(churnLife / every)
	tick := time.NewTicker(every)
	n := 0
	stopped := ""
	for ; time.Since(o.Start) < d; n++ {
		<-tick.C
		mu.Lock()
		failing := len(errs) > 0
		mu.Unlock()
		if failing {
			stopped = fmt.Sprintf("; stopped after %s: the API server failed a call", time.Since(o.Start).Round(time.Second))
			break
		}
		node, name := e.nodes[n%len(e.nodes)].Name, fmt.Sprintf("churn-%d", n)
		call(func() error {
			_, err := pods.Create(ctx, draining(pinned(cluster.EchoPod(workloadNS, name, labels), node)), metav1.CreateOptions{})
			return err
		})
		if n >= lag {
			old := fmt.Sprintf("churn-%d", n-lag)
			call(func() error { return pods.Delete(ctx, old, metav1.DeleteOptions{}) })
		}
	}
	tick.Stop()
	o.Restored = time.Now()
	wg.Wait()
	for k := max(0, n-lag); k < n; k++ {
		old := fmt.Sprintf("churn-%d", k)
		call(func() error { return pods.Delete(ctx, old, metav1.DeleteOptions{}) })
	}
	wg.Wait()
	stable := len(e.nodes) * echoPerNode
	// Hundreds of pods to tear down: twice the usual timeout.
	o.Green = waitFor(ctx, 2*e.timeout, func() bool {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "churn=yes"})
		if err != nil || len(l.Items) > 0 {
			return false
		}
		n, err := readyEndpoints(ctx, e.cs)
		return err == nil && n == stable
	})
	o.Note = fmt.Sprintf("%d pods created and deleted over %s, each living %s%s", n, d, churnLife, stopped)
	return o, errors.Join(errs...)
}
