package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodenet/nodenet/internal/upstream"
)

// options are the command line.
type options struct {
	cmd       string
	repo      string // nodenet source tree (bin/nodenet, bin/nodenet-image.tar)
	cacheRoot string
	backends  []string // host-gw, vxlan; up takes one, bench each in turn
	modes     []string // proxy modes to check, in order
	dataplane string   // up: nodenet, or upstream (flannel + kube-proxy)
	upstream  []string // bench: kube-proxy modes of the upstream data plane; none to skip it
	data      string   // bench: results file to write; report: to read
	out       string   // report directory
	runs      int
	seconds   int
	add       bool // bench: add to -data rather than replace it
	services  int  // bench: filler Services beside the benchmark's (fillers.go)
	// hostRouting is nodenet's flanneld --host-routing (kernel or ebpf).
	hostRouting string
	// settle, settleLoad: bench waits up to settle before each plane for
	// the 1-minute load average to fall to settleLoad (settle.go).
	settle     time.Duration
	settleLoad float64
	// cpuBind is netperf's -T "client,server": the CPUs the client and
	// the netserver it talks to are bound to ("" = not bound).
	cpuBind string
	// oneCluster: bench both data planes on one cluster, alternated run
	// by run (onecluster.go).
	oneCluster bool
}

var commands = map[string]string{
	"build":  "build (or find in the cache) the node image, kind, kubectl and the bench image",
	"up":     "build, create the cluster, deploy nodenet, check traffic in every proxy mode",
	"down":   "delete the cluster: no containers, volumes or network left",
	"bench":  "netperf on the running cluster's data planes, results to -data and a report",
	"report": "regenerate the Markdown + SVG report from a results file",
}

func parseArgs(args []string, stderr io.Writer) (options, error) {
	if len(args) == 0 || commands[args[0]] == "" {
		fmt.Fprintln(stderr, "usage: go run ./bench/kind <command> [flags]")
		for _, c := range []string{"build", "up", "down", "bench", "report"} {
			fmt.Fprintf(stderr, "  %-7s %s\n", c, commands[c])
		}
		if len(args) == 0 {
			return options{}, errors.New("no command")
		}
		return options{}, fmt.Errorf("unknown command %q", args[0])
	}
	o := options{cmd: args[0]}
	root, err := defaultCacheRoot()
	if err != nil {
		return o, err
	}
	fs := flag.NewFlagSet(o.cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.repo, "repo", ".", "nodenet source tree")
	fs.StringVar(&o.cacheRoot, "cache", root, "where built artifacts are kept")
	backends := fs.String("backend", "host-gw", "flanneld backend: host-gw or vxlan (bench: a comma-separated list, a fresh cluster each)")
	modes := fs.String("proxy-modes", "iptables,nftables,ipvs,ebpf", "nodenet proxy modes to check (up) or measure (bench), in order; a mode the nodes cannot run (ipvs without IPVS in the host's kernel; ebpf without a cgroup v2 cgroup of the node's own or a bpf file system) is skipped with the reason")
	fs.StringVar(&o.dataplane, "dataplane", nodenetName, "up: nodenet, or upstream (flannel "+upstream.FlanneldVersion+" + kube-proxy "+kubernetesVersion+"; -proxy-modes are then kube-proxy's)")
	upModes := fs.String("upstream-modes", "iptables,nftables", "bench: kube-proxy modes of the upstream data plane measured beside nodenet, or none")
	fs.StringVar(&o.data, "data", "bench/results/kind-netperf.json", "results file")
	fs.StringVar(&o.out, "out", "bench/results", "report directory")
	fs.BoolVar(&o.add, "add", false, "bench: add to the results file rather than replace it: a result of the same data plane, scenario and test is replaced, the file's node-to-node baseline is kept (not measured again), and the notes say which data planes the later run measured")
	fs.IntVar(&o.runs, "runs", 3, "runs of each netperf test")
	fs.IntVar(&o.seconds, "seconds", 5, "length of each netperf run")
	fs.IntVar(&o.services, "services", 0, "bench: this many more ClusterIP Services (one endpoint each) on every cluster, programmed before each plane is measured: the scale at which a proxy's per-connection lookup shows")
	fs.StringVar(&o.hostRouting, "host-routing", "ebpf", "nodenet's flanneld --host-routing: ebpf (pod-to-pod between nodes forwarded by TCX programs, past netfilter) or kernel (flannel's own forwarding)")
	fs.DurationVar(&o.settle, "settle", 3*time.Minute, "bench: before each data plane, wait up to this long for the machine's 1-minute load average to fall to -settle-load (0: do not wait)")
	fs.Float64Var(&o.settleLoad, "settle-load", 1.5, "bench: the 1-minute load average -settle waits for")
	cpuBind := fs.String("cpu-bind", defaultCPUBind(runtime.NumCPU()), "bench: netperf -T client,server: the CPUs every netperf client and its netserver are bound to, the same in every scenario and data plane (the scheduler otherwise puts them on one CPU in some runs and on two in others, the largest part of a request/response figure's spread), or none")
	fs.BoolVar(&o.oneCluster, "one-cluster", false, "bench: both data planes on one cluster of four workers, nodenet on two and upstream flannel + kube-proxy on the other two, each figure's runs alternated between them run by run (nodenet's first -upstream-modes mode, or iptables if listed, beside nodenet modes kube-proxy lacks)")
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if o.oneCluster && (o.cmd != "bench" || *upModes == "none") {
		return o, errors.New("-one-cluster: bench only, with -upstream-modes")
	}
	if o.settle < 0 || o.settleLoad <= 0 {
		return o, errors.New("-settle must not be negative and -settle-load must be positive")
	}
	if o.cpuBind, err = parseCPUBind(*cpuBind, runtime.NumCPU()); err != nil {
		return o, err
	}
	if o.hostRouting != "ebpf" && o.hostRouting != "kernel" {
		return o, fmt.Errorf("-host-routing %q: ebpf or kernel", o.hostRouting)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for _, b := range strings.Split(*backends, ",") {
		switch b {
		case "host-gw", "vxlan":
			o.backends = append(o.backends, b)
		default:
			return o, fmt.Errorf("-backend %q: host-gw or vxlan", b)
		}
	}
	if len(o.backends) > 1 && o.cmd != "bench" {
		return o, errors.New("-backend: one backend, except for bench")
	}
	switch o.dataplane {
	case nodenetName, upstreamName:
	default:
		return o, fmt.Errorf("-dataplane %q: nodenet or upstream", o.dataplane)
	}
	if o.modes, err = parseModes("-proxy-modes", *modes, o.dataplane == upstreamName); err != nil {
		return o, err
	}
	if *upModes != "none" {
		if o.upstream, err = parseModes("-upstream-modes", *upModes, true); err != nil {
			return o, err
		}
	}
	if o.runs < 1 || o.seconds < 1 {
		return o, errors.New("-runs and -seconds must be at least 1")
	}
	if o.services < 0 || o.services > maxFillers {
		return o, fmt.Errorf("-services %d: between 0 and %d (the Service network's addresses)", o.services, maxFillers)
	}
	if o.oneCluster && o.services > 0 {
		return o, errors.New("-one-cluster with -services: not measured that way (the filler Services' endpoint is the first layout's echo pod); run them apart")
	}
	return o, nil
}

// defaultCPUBind puts the netperf client and its server on two different
// CPUs when there are two, as a latency benchmark on a quiet machine would;
// with one CPU there is nothing to choose.
func defaultCPUBind(cpus int) string {
	if cpus < 2 {
		return "none"
	}
	return "0,1"
}

// parseCPUBind checks -cpu-bind: "none", or two CPU numbers the machine
// has (the kind nodes are containers on it, with all its CPUs).
func parseCPUBind(v string, cpus int) (string, error) {
	if v == "none" {
		return "", nil
	}
	parts := strings.Split(v, ",")
	if len(parts) != 2 {
		return "", fmt.Errorf("-cpu-bind %q: want client,server (two CPU numbers) or none", v)
	}
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n >= cpus {
			return "", fmt.Errorf("-cpu-bind %q: %q is not a CPU of this machine (0 to %d)", v, p, cpus-1)
		}
	}
	return v, nil
}

// modeCheck is the node inspection a proxy mode needs before it is
// deployed (nil: none; iptables and nftables run on any node).
func (k *kcluster) modeCheck(mode string) func(context.Context) (string, error) {
	switch mode {
	case "ebpf":
		return k.ebpfCheck
	case "ipvs":
		return k.ipvsCheck
	}
	return nil
}

// parseModes reads a comma-separated list of proxy modes: nodenet's
// (iptables, nftables, ipvs, ebpf) or kube-proxy's as measured here (iptables,
// nftables).
func parseModes(flagName, list string, kubeProxy bool) ([]string, error) {
	valid := map[string]bool{"iptables": true, "nftables": true, "ipvs": !kubeProxy, "ebpf": !kubeProxy}
	var modes []string
	for _, m := range strings.Split(list, ",") {
		if !valid[m] {
			if kubeProxy {
				return nil, fmt.Errorf("%s: %q is not a kube-proxy mode measured here (iptables, nftables)", flagName, m)
			}
			return nil, fmt.Errorf("%s: %q is not a mode this build carries (iptables, nftables, ipvs, ebpf)", flagName, m)
		}
		modes = append(modes, m)
	}
	return modes, nil
}

func main() {
	o, err := parseArgs(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kind:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "kind:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	p := newProgress(os.Stdout)
	c := cache{root: o.cacheRoot}
	if err := os.MkdirAll(c.root, 0o755); err != nil {
		return err
	}
	repo, err := filepath.Abs(o.repo)
	if err != nil {
		return err
	}
	switch o.cmd {
	case "report":
		return writeReport(o)
	case "down":
		kindBin := filepath.Join(c.dir("go-kind", kindRecipe().key()), "bin", "kind")
		if _, err := os.Stat(kindBin); err != nil {
			kindBin = ""
		}
		return deleteCluster(ctx, p, c, kindBin)
	}
	b, err := buildAll(ctx, p, c, repo)
	if err != nil || o.cmd == "build" {
		return err
	}
	k, err := newCluster(p, b, c)
	if err != nil {
		return err
	}
	k.hostRouting = o.hostRouting
	k.oneCluster = o.oneCluster
	if o.cmd == "bench" {
		return k.bench(ctx, o, repo)
	}
	return k.up(ctx, o, repo)
}

// bringUp creates a fresh cluster with the data plane dp in the first
// runnable mode of modes and the check workload, and returns the modes
// that can run, in order, with a note for each one skipped.
func (k *kcluster) bringUp(ctx context.Context, repo, dp, backend string, modes []string) ([]string, []string, error) {
	if err := deleteCluster(ctx, k.p, k.c, k.b.kind); err != nil {
		return nil, nil, err
	}
	var notes []string
	if dp == upstreamName {
		if err := k.create(ctx, modes[0], 2); err != nil {
			return nil, nil, err
		}
		if err := k.deployUpstream(ctx, repo, backend, nil); err != nil {
			return nil, nil, err
		}
	} else {
		if err := k.create(ctx, "", 2); err != nil {
			return nil, nil, err
		}
		var err error
		if modes, notes, err = k.runnableModes(ctx, backend, modes); err != nil {
			return nil, notes, err
		}
		if err := k.deployNodenet(ctx, repo, backend, modes[0], nil); err != nil {
			return nil, nil, err
		}
	}
	if err := k.p.step(ctx, "check workload (echo pods, NodePort Service)", func(ctx context.Context) error {
		if err := k.apply(ctx, checkWorkload(wholeCluster)); err != nil {
			return err
		}
		return k.waitPods(ctx, checkNS, "pod")
	}); err != nil {
		return nil, nil, err
	}
	return modes, notes, nil
}

// runnableModes are the nodenet modes of modes the nodes can run, in
// order, with a note for each one skipped; an error if none can.
func (k *kcluster) runnableModes(ctx context.Context, backend string, modes []string) ([]string, []string, error) {
	var runnable, notes []string
	for _, m := range modes {
		if check := k.modeCheck(m); check != nil {
			why, err := check(ctx)
			if err != nil {
				return nil, nil, err
			}
			if why != "" {
				k.p.note("SKIP proxy mode %s: %s", m, why)
				notes = append(notes, fmt.Sprintf("nodenet %s %s not run: %s", backend, m, why))
				continue
			}
		}
		runnable = append(runnable, m)
	}
	if len(runnable) == 0 {
		return nil, notes, fmt.Errorf("no proxy mode of %v can run here: %s", modes, strings.Join(notes, "; "))
	}
	return runnable, notes, nil
}

// switchMode moves the data plane dp to another proxy mode.
func (k *kcluster) switchMode(ctx context.Context, dp, mode string) error {
	if dp == upstreamName {
		return k.switchKubeProxy(ctx, mode)
	}
	return k.switchProxy(ctx, mode)
}

// planeName names a data plane in results: "nodenet host-gw iptables",
// "upstream vxlan nftables".
func planeName(dp, backend, mode string) string { return dp + " " + backend + " " + mode }

// up creates the cluster with the data plane in the first mode of
// o.modes and checks traffic, then switches through the other modes.
func (k *kcluster) up(ctx context.Context, o options, repo string) error {
	modes, notes, err := k.bringUp(ctx, repo, o.dataplane, o.backends[0], o.modes)
	if err != nil {
		return err
	}
	for i, m := range modes {
		if i > 0 {
			if err := k.switchMode(ctx, o.dataplane, m); err != nil {
				return err
			}
		}
		if err := k.checkTraffic(ctx, planeName(o.dataplane, o.backends[0], m), wholeCluster); err != nil {
			return err
		}
	}
	for _, n := range notes {
		k.p.note("%s", n)
	}
	k.p.note("cluster up: kubectl --kubeconfig %s get pods -A; remove with make kind-down", k.kubeconfig)
	return nil
}

// deployNodenet loads bin/nodenet-image.tar and applies the manifest
// `nodenet manifest` renders for the backend and mode; on a side's nodes
// only if sd is set (the manifest's --node-selector).
func (k *kcluster) deployNodenet(ctx context.Context, repo, backend, mode string, sd *side) error {
	if err := k.load(ctx, filepath.Join(repo, "bin", "nodenet-image.tar")); err != nil {
		return err
	}
	if err := k.p.step(ctx, "kubectl apply nodenet manifest ("+backend+", "+mode+", host routing "+k.hostRouting+")", func(ctx context.Context) error {
		// The daemons reach the API server directly (manifest
		// --api-server): the kubernetes Service's ClusterIP needs a
		// running proxy, and nodenet's proxy is the only one here. An
		// address, not the node's name: host-network pods resolve through
		// the cluster DNS, which this cluster does without.
		nodes, err := k.nodes(ctx)
		if err != nil || nodes[cpNode] == "" {
			return fmt.Errorf("control-plane address: %v", err)
		}
		args := []string{"manifest", "--backend", backend, "--proxy-mode", mode,
			"--host-routing", k.hostRouting, "--api-server", net.JoinHostPort(nodes[cpNode], "6443")}
		if sd != nil {
			args = append(args, "--node-selector", planeLabel+"="+sd.dp)
		}
		out, err := exec.CommandContext(ctx, filepath.Join(repo, "bin", "nodenet"), args...).Output()
		if err != nil {
			return fmt.Errorf("nodenet manifest (make build first): %w", err)
		}
		m := string(out)
		return k.apply(ctx, m)
	}); err != nil {
		return err
	}
	return k.waitReady(ctx, "nodenet-system/nodenet", sd)
}
