package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/nodenet/nodenet/cluster"
	"github.com/nodenet/nodenet/daemonset"
	"github.com/nodenet/nodenet/daemonset/manifest"
	"github.com/nodenet/nodenet/flanneld"
	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/internal/periodic"
	"github.com/nodenet/nodenet/node"
	"github.com/nodenet/nodenet/node/echo/echocmd"
	"github.com/nodenet/nodenet/node/shim"
	"github.com/nodenet/nodenet/proxy/proxycmd"
)

const defaultStateDir = "/tmp/nodenet"

// upOptions are `nodenet up`'s flags.
type upOptions struct {
	cfg      cluster.Config
	demo     bool
	demoExit bool
	demoPods int
	// hostRouting is flanneld's --host-routing in the DaemonSet.
	hostRouting string
}

// parseUp parses and validates every flag of `nodenet up` without touching
// the machine, so that a typo is refused before anything starts.
func parseUp(args []string) (upOptions, error) {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	var o upOptions
	cfg := &o.cfg
	fs.IntVar(&cfg.Nodes, "nodes", 3, fmt.Sprintf("number of nodes (1-%d)", cluster.MaxNodes))
	fs.StringVar(&cfg.Backend, "backend", cluster.Backends[0], "flannel backend: "+strings.Join(cluster.Backends, " or "))
	fs.StringVar(&cfg.ProxyMode, "proxy-mode", "iptables", "proxy data plane on every node: a mode of `nodenet proxy --proxy-mode` built into this binary, or "+cluster.ProxyModeNone)
	fs.StringVar(&o.hostRouting, "host-routing", flanneld.HostRoutingKernel, "flanneld's --host-routing on every node: kernel, or ebpf (pod-to-pod between nodes forwarded by TCX programs, past netfilter)")
	fs.StringVar(&cfg.Dir, "dir", defaultStateDir, "state directory (logs, kubeconfigs, per-node CNI dirs); new, empty or an earlier cluster's")
	fs.StringVar(&cfg.Name, "name", "local", "cluster name; namespaces are nn-<name>-*")
	fs.StringVar(&cfg.CNIBinary, "cni-plugin", "", "the nodenet-cni binary (default: nodenet-cni next to this binary)")
	fs.IntVar(&cfg.APIPort, "api-port", 6443, "port on 127.0.0.1 (root namespace) forwarded to the API server (0: any)")
	fs.BoolVar(&cfg.Replace, "replace", false, "stop the cluster of the same --dir or --name if one is running, instead of refusing")
	fs.StringVar(&cfg.LBPool, "lb-ip-pool", cluster.DefaultLBPool, "IPv4 CIDR LoadBalancer Service IPs are handed out from; the vpc router routes each to a node")
	fs.DurationVar(&cfg.NodeMonitorGracePeriod, "node-monitor-grace-period", cluster.DefaultNodeMonitorGracePeriod, "how long a node may miss its heartbeats before the controller manager marks it NotReady and takes its pods out of the Services (kube-controller-manager's flag; at least "+cluster.MinNodeMonitorGracePeriod.String()+")")
	fs.BoolVar(&o.demo, "demo", false, "once the cluster is up, deploy echo pods and a Service and check traffic")
	fs.BoolVar(&o.demoExit, "demo-exit", false, "tear down and exit after the demo (status 1 if a check failed), or without --demo once the nodes are Ready")
	fs.IntVar(&o.demoPods, "demo-pods", 6, "echo pods the demo deploys")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %v", fs.Args()))
	}
	self, err := os.Executable()
	if err != nil {
		return o, fmt.Errorf("find this binary: %w", err)
	}
	cfg.Binary = self
	if cfg.CNIBinary == "" {
		cfg.CNIBinary = filepath.Join(filepath.Dir(self), "nodenet-cni")
	}
	// The same modes `nodenet proxy` accepts, from the same map: a mode
	// it lacks would only show up as crash-looping proxies.
	if cfg.ProxyMode != cluster.ProxyModeNone {
		modes := proxycmd.DefaultModes(slog.New(slog.DiscardHandler))
		if err := modes.Check(cfg.ProxyMode); err != nil {
			errs = append(errs, fmt.Errorf("%w; up also accepts %s (no proxy)", err, cluster.ProxyModeNone))
		} else if avail := modes[cfg.ProxyMode].Available; avail != nil {
			// The nodes are namespaces of this kernel: a mode it cannot
			// run is refused here, before anything starts.
			if err := avail(); err != nil {
				errs = append(errs, fmt.Errorf("--proxy-mode=%s: %w", cfg.ProxyMode, err))
			}
		}
	}
	objs, err := daemonObjects(cfg.Backend, cfg.ProxyMode, o.hostRouting)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Daemons = objs
	if o.demoPods < 1 {
		errs = append(errs, fmt.Errorf("--demo-pods %d: want at least 1", o.demoPods))
	}
	errs = append(errs, cfg.Validate())
	return o, errors.Join(errs...)
}

// daemonObjects are the objects of daemonset/nodenet.yaml as `nodenet
// manifest` renders them for the local cluster: its backend, proxy mode,
// host routing and pod network. With no proxy the DaemonSet has no proxy
// container.
func daemonObjects(backend, proxyMode, hostRouting string) ([]runtime.Object, error) {
	o := manifest.Defaults()
	o.Backend = backend
	o.HostRouting = hostRouting
	if proxyMode != cluster.ProxyModeNone {
		o.ProxyMode = proxyMode
	}
	o.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix(cluster.ClusterCIDR)}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("DaemonSet manifest: %w", err)
	}
	objs := manifest.Objects(o)
	if proxyMode == cluster.ProxyModeNone {
		for _, obj := range objs {
			if ds, ok := obj.(*appsv1.DaemonSet); ok {
				spec := &ds.Spec.Template.Spec
				spec.Containers = slices.DeleteFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == manifest.ProxyContainer })
			}
		}
	}
	return objs, nil
}

// runUp is `nodenet up`: a local cluster in network namespaces, supervised
// in the foreground until Ctrl-C.
func runUp(ctx context.Context, args []string) error {
	o, err := parseUp(args)
	if err != nil {
		return err
	}
	cfg, demo, demoExit, demoPods := o.cfg, o.demo, o.demoExit, o.demoPods
	cfg.Out = os.Stdout
	fmt.Printf("nodenet up: %d nodes, backend %s, proxy %s, state in %s\n", cfg.Nodes, cfg.Backend, cfg.ProxyMode, cfg.Dir)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	c, err := cluster.Up(runCtx, cfg) // prints the namespaces and control plane stages
	if err != nil {
		stop()
		if c != nil {
			_ = c.Wait()
		}
		return err
	}
	cs, err := cluster.Client(c.AdminKube)
	if err != nil {
		stop()
		return errors.Join(err, c.Wait())
	}
	result := waitNodes(runCtx, cs, c, cfg)
	stayUp := !demoExit
	if demo && result == nil {
		start := time.Now()
		result = runDemoIn(runCtx, cs, c, cfg, o.hostRouting, demoPods, stayUp)
		outcome := "all checks passed"
		if result != nil {
			outcome = result.Error()
		}
		cluster.Stage(os.Stdout, "demo", time.Since(start), outcome)
	}
	if !stayUp {
		stop()
		return errors.Join(result, c.Wait())
	}
	printStatus(c)
	fmt.Printf("\ncluster running; `kubectl --kubeconfig %s get nodes,pods -A -o wide`; Ctrl-C to tear down\n", c.AdminKube)
	go reportChanges(runCtx, c)
	<-ctx.Done()
	fmt.Println("\ntearing down…")
	stop()
	if err := c.Wait(); err != nil {
		return err
	}
	fmt.Println("cluster removed (logs kept in " + filepath.Join(cfg.Dir, "logs") + ")")
	return nil
}

// waitNodes waits for the nodes to be Ready and then for their daemons to
// say they are ready, printing a stage line for each.
func waitNodes(ctx context.Context, cs kubernetes.Interface, c *cluster.Cluster, cfg cluster.Config) error {
	start := time.Now()
	nodes, err := cluster.WaitNodesReady(ctx, cs, cfg.Nodes, 120*time.Second)
	if err != nil {
		fmt.Printf("nodes not ready: %v\n", err)
		return err
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name + " " + n.Spec.PodCIDR
	}
	cluster.Stage(os.Stdout, "nodes Ready", time.Since(start), strings.Join(names, ", "))
	start = time.Now()
	dsNS, dsName := c.DaemonSet()
	ds, err := cluster.WaitDaemonSet(ctx, cs, dsNS, dsName, cfg.Nodes, 120*time.Second)
	if err != nil {
		fmt.Printf("node daemons not ready: %v\n", err)
		return err
	}
	what := fmt.Sprintf("daemonset %s/%s: %d/%d pods ready (flanneld %s + proxy %s on every node)", ds.Namespace, ds.Name, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled, cfg.Backend, cfg.ProxyMode)
	if cfg.ProxyMode == cluster.ProxyModeNone {
		what = fmt.Sprintf("daemonset %s/%s: %d/%d pods ready (flanneld %s on every node, no proxy)", ds.Namespace, ds.Name, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled, cfg.Backend)
	}
	cluster.Stage(os.Stdout, "node daemons", time.Since(start), what)
	return nil
}

// reportChanges prints a component's status line whenever it changes (an
// exit, a restart), instead of the whole block again and again: the hints
// printed above stay on the screen.
func reportChanges(ctx context.Context, c *cluster.Cluster) {
	last := c.StatusLines()
	periodic.Every(ctx, 2*time.Second, func(context.Context) {
		now := c.StatusLines()
		for i, l := range now {
			if i >= len(last) || l != last[i] {
				fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), l)
			}
		}
		last = now
	})
}

func runDemoIn(ctx context.Context, cs kubernetes.Interface, c *cluster.Cluster, cfg cluster.Config, hostRouting string, pods int, hints bool) error {
	o := cluster.DemoOptions{Binary: cfg.Binary, Kubeconfig: c.AdminKube, Nodes: cfg.Nodes, Pods: pods, ExternalNetns: cluster.VPCNetns(cfg.Name),
		Backend: cfg.Backend, HostRouting: hostRouting, NodeNetns: map[string]string{}, Out: os.Stdout}
	for i := 1; i <= cfg.Nodes; i++ {
		o.NodeNetns[cluster.NodeName(i)] = cluster.NodeNetns(cfg.Name, i)
	}
	if hints {
		o.Hints = os.Stdout
	}
	fails, err := cluster.RunDemo(ctx, cs, o)
	if err != nil {
		fmt.Printf("demo: %v\n", err)
		return err
	}
	if fails > 0 {
		fmt.Printf("\ndemo: %d checks FAILED\n", fails)
		return fmt.Errorf("%d demo checks failed", fails)
	}
	fmt.Println("\ndemo: all checks passed")
	return nil
}

func printStatus(c *cluster.Cluster) {
	fmt.Println("components:")
	for _, l := range c.StatusLines() {
		fmt.Println("  " + l)
	}
}

// runDown is `nodenet down`: stops the cluster's `up` if it is running and
// removes whatever is left (idempotent).
func runDown(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	dir := fs.String("dir", defaultStateDir, "state directory of the cluster")
	name := fs.String("name", "", "cluster name (default: from <dir>/cluster.json)")
	keepLogs := fs.Bool("keep-logs", false, "keep <dir>/logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cluster.DownLive(*dir, *name, *keepLogs, os.Stdout); err != nil {
		return err
	}
	fmt.Println("cluster removed")
	return nil
}

// runStatus is `nodenet status`.
func runStatus(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	dir := fs.String("dir", defaultStateDir, "state directory of the cluster")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return cluster.Status(ctx, *dir, os.Stdout)
}

// runAgent is `nodenet agent`: the node agent (kubelet-lite).
func runAgent(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var o node.Options
	var kubeconfig string
	var binDirs cli.StringList
	var logs cli.LogFlags
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.NodeIP, "node-ip", "", "the node's InternalIP")
	fs.StringVar(&o.Zone, "zone", "zone-a", "topology.kubernetes.io/zone label")
	fs.StringVar(&o.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "CNI configuration directory")
	fs.Var(&binDirs, "cni-bin-dir", "CNI plugin directories (repeatable; default /opt/cni/bin)")
	fs.StringVar(&o.CNICacheDir, "cni-cache-dir", "/var/lib/cni", "libcni cache directory")
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/nodenet/agent", "per-pod state and container logs")
	fs.StringVar(&o.CNIPlugin, "nodenet-cni", "", "the nodenet-cni binary a container command "+daemonset.NodenetCNIPath+" runs (default: nodenet-cni next to this binary)")
	fs.StringVar(&o.HostRoot, "host-root", "/", "directory hostPath volumes are under (the local cluster gives each node one)")
	fs.StringVar(&o.PodCgroup, "pod-cgroup", "", "cgroup v2 directory every pod process starts in, created if missing (the local cluster's per-node cgroup; default: the agent's own cgroup)")
	fs.StringVar(&o.APIServer, "pod-api-server", "", "HOST:PORT pods get as KUBERNETES_SERVICE_HOST/PORT (default: the kubernetes Service's)")
	fs.StringVar(&o.NetnsPrefix, "netns-prefix", "nn-pod-", "prefix of pod network namespace names")
	fs.DurationVar(&o.Heartbeat, "node-status-update-frequency", 10*time.Second, "how often the lease and node status are renewed")
	fs.StringVar(&o.KubeletAddress, "address", "0.0.0.0", "IP the kubelet port (container logs, HTTPS) listens on")
	fs.IntVar(&o.KubeletPort, "port", 10250, "the kubelet port (0 = do not serve container logs)")
	clientCA := fs.String("client-ca-file", "", "CA that signs the API server's kubelet-client certificate (default: the kubeconfig's certificate authority)")
	logs.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.NodeName == "" || o.NodeIP == "" {
		return errors.New("--node-name and --node-ip are required")
	}
	if len(binDirs) == 0 {
		binDirs = cli.StringList{"/opt/cni/bin"}
	}
	o.CNIBinDirs = binDirs
	var err error
	if o.Logger, err = logs.Logger("agent"); err != nil {
		return err
	}
	if o.Self, err = os.Executable(); err != nil {
		return err
	}
	if o.Client, err = cli.NodeClient(kubeconfig, component()); err != nil {
		return err
	}
	if o.ClientCA, err = agentClientCA(kubeconfig, *clientCA); err != nil {
		return err
	}
	// Pods check the API server as the agent does: the kubeconfig's CA.
	if o.APIServerCA, err = agentClientCA(kubeconfig, ""); err != nil {
		return err
	}
	a, err := node.New(o)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// runEcho is `nodenet echo`: the built-in TCP/UDP/HTTP echo server pods
// run, or with --client a one-shot client (also built alone as
// nodenet-echo).
func runEcho(ctx context.Context, args []string) error {
	return echocmd.Command(ctx, "echo", args)
}

// agentClientCA is the CA the agent checks the API server's client
// certificate against: --client-ca-file, else the CA the kubeconfig
// trusts for the API server (the nodenet API server signs both with it).
func agentClientCA(kubeconfig, file string) ([]byte, error) {
	if file == "" {
		cfg, err := cli.RestConfig(kubeconfig, 0, 0, component())
		if err != nil {
			return nil, err
		}
		if len(cfg.TLSClientConfig.CAData) > 0 {
			return cfg.TLSClientConfig.CAData, nil
		}
		file = cfg.TLSClientConfig.CAFile
	}
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read client CA: %w", err)
	}
	return b, nil
}

// runLogShim is `nodenet logshim`, the shim (node/shim) the agent runs
// each container and CNI plugin through when nodenet-shim was not built
// next to this binary.
func runLogShim(_ context.Context, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("logshim: %w", err)
	}
	os.Exit(shim.Main([]string{self, "logshim"}, args))
	return nil
}
