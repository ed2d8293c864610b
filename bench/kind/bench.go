package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/nodenet/nodenet/bench/kind/report"
	"github.com/nodenet/nodenet/internal/atomicfile"
	"github.com/nodenet/nodenet/internal/upstream"
)

const benchNS = "nodenet-bench"

// Ports: netperf's control connection, and its data connection fixed with
// the test option -P so a Service can carry it. netserver listens on
// whatever data port the client names, so the port the client dials must
// be the one the pod listens on: through a Service, each data port is the
// Service port, target port and NodePort at once (inside the NodePort
// range).
//
// Each path to srv-b has a data port of its own (pod → pod, pod →
// ClusterIP, outside → NodePort): netperf's TCP_CRR binds its local ports
// itself, counting up from a start drawn from its pid, so with one data
// port the runs of different paths reuse each other's 4-tuples
// (cli-a:port → srv-b:data) while srv-b still holds them in TIME_WAIT, and
// a figure for one path would depend on which path ran before it. What
// that reuse does and does not explain about TCP_CRR through a ClusterIP
// is in README.md ("TCP_CRR through a ClusterIP").
const (
	ctlPort      = 12865
	dataPort     = 30866 // pod → pod (srv-a, srv-b directly)
	svcDataPort  = 30867 // pod → ClusterIP → srv-b
	npDataPort   = 30868 // outside → NodePort → srv-b
	nodePortCtl  = 30865
	hostCtlPort  = 22865 // host-network netserver of the baseline
	hostDataPort = 22866
)

var netperfTests = []struct{ name, unit string }{
	{"TCP_STREAM", "Mbit/s"}, {"TCP_RR", "trans/s"}, {"TCP_CRR", "trans/s"}, {"UDP_RR", "trans/s"},
}

// benchWorkload: netserver pods on both of the side's workers (pod
// network), a client pod on the first, host-network netservers and
// clients for the baseline and the outside → NodePort scenario, and a
// NodePort Service in front of the second worker's netserver.
func benchWorkload(sd side) string {
	img := benchImageRef
	srv := func(port int) string {
		return container("netserver", img, "netserver", "-D", "-p", strconv.Itoa(port)) +
			container("iperf3", img, "iperf3", "-s", "-p", strconv.Itoa(port+1000))
	}
	m := namespace(benchNS) +
		pod(benchNS, sd.name("srv-a"), sd.w1, img, false, nil, srv(ctlPort)) +
		pod(benchNS, sd.name("srv-b"), sd.w2, img, false, map[string]string{"app": sd.name("srv-b")}, srv(ctlPort)) +
		pod(benchNS, sd.name("cli-a"), sd.w1, img, false, nil, srv(ctlPort)) +
		pod(benchNS, sd.name("host-b"), sd.w2, img, true, nil, srv(hostCtlPort)) +
		pod(benchNS, sd.name("host-a"), sd.w1, img, true, nil, srv(hostCtlPort+100))
	if sd.outside {
		m += pod(benchNS, "host-cp", cpNode, img, true, nil, srv(hostCtlPort+200))
	}
	return m + fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: %s
spec:
  type: NodePort
  selector:
    app: %[1]s
  ports:
  - {name: ctl, port: %[3]d, targetPort: %[4]d, nodePort: %[5]d, protocol: TCP}
  - {name: svc-data, port: %[6]d, targetPort: %[6]d, nodePort: %[6]d, protocol: TCP}
  - {name: svc-data-udp, port: %[6]d, targetPort: %[6]d, nodePort: %[6]d, protocol: UDP}
  - {name: np-data, port: %[7]d, targetPort: %[7]d, nodePort: %[7]d, protocol: TCP}
  - {name: np-data-udp, port: %[7]d, targetPort: %[7]d, nodePort: %[7]d, protocol: UDP}
---
`, sd.name("srv-b"), benchNS, ctlPort, ctlPort, nodePortCtl+sd.portShift, svcDataPort+sd.portShift, npDataPort+sd.portShift)
}

// scenario is where a netperf client runs and what it dials.
type scenario struct {
	name, from, host string
	ctl, data        int
	// nodes whose conntrack statistics the TCP_CRR runs are watched on:
	// the client's and the server's (none for the baseline, which no
	// proxy rule touches).
	nodes []string
	// pair, if set, is run right after each run of this scenario, same
	// test: the node-to-node baseline beside pod → pod across nodes, so
	// their ratio is taken run by run, not across minutes of a shared
	// machine's drift.
	pair *scenario
}

// scenarios are a side's pod scenarios and its node-to-node baseline.
func (k *kcluster) scenarios(ctx context.Context, sd side) ([]scenario, []scenario, error) {
	ip := func(pod string) (string, error) {
		return k.kubectl(ctx, "-n", benchNS, "get", "pod", sd.name(pod), "-o", "jsonpath={.status.podIP}")
	}
	a, err := ip("srv-a")
	if err != nil {
		return nil, nil, err
	}
	b, err := ip("srv-b")
	if err != nil {
		return nil, nil, err
	}
	cip, err := k.kubectl(ctx, "-n", benchNS, "get", "svc", sd.name("srv-b"), "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		return nil, nil, err
	}
	nodes, err := k.nodes(ctx)
	if err != nil {
		return nil, nil, err
	}
	shift := sd.portShift
	base := []scenario{{name: "node-node", from: sd.name("host-a"), host: nodes[sd.w2], ctl: hostCtlPort, data: hostDataPort}}
	cli := sd.name("cli-a")
	pods := []scenario{
		{name: "pod-pod same node", from: cli, host: a, ctl: ctlPort, data: dataPort + shift, nodes: []string{sd.w1}},
		{name: "pod-pod across nodes", from: cli, host: b, ctl: ctlPort, data: dataPort + shift, nodes: []string{sd.w1, sd.w2}, pair: &base[0]},
		{name: "pod-ClusterIP-pod", from: cli, host: cip, ctl: ctlPort, data: svcDataPort + shift, nodes: []string{sd.w1, sd.w2}},
		{name: "outside-NodePort-pod", from: "host-cp", host: nodes[sd.w2], ctl: nodePortCtl + shift, data: npDataPort + shift, nodes: []string{cpNode, sd.w2}},
	}
	return pods, base, nil
}

// netperf runs one test once and returns its figure: Mbit/s for
// streams, transactions/s for request/response.
func (k *kcluster) netperf(ctx context.Context, s scenario, test string, seconds int, cpuBind string) (float64, error) {
	out, err := k.kubectl(ctx, netperfArgs(s, test, seconds, cpuBind)...)
	if err != nil {
		return 0, err
	}
	return parseNetperf(out)
}

// netperfArgs is the kubectl command line of one netperf run from s.from.
func netperfArgs(s scenario, test string, seconds int, cpuBind string) []string {
	args := []string{"-n", benchNS, "exec", s.from, "-c", "netserver", "--", "netperf", "-P", "0",
		"-H", s.host, "-p", strconv.Itoa(s.ctl), "-l", strconv.Itoa(seconds), "-t", test}
	if cpuBind != "" {
		args = append(args, "-T", cpuBind)
	}
	return append(args, "--", "-P", ","+strconv.Itoa(s.data), "-o", "THROUGHPUT")
}

// parseNetperf reads the value of `-P 0 -- -o THROUGHPUT`: the last line
// that is a number (netperf may print warnings before it).
func parseNetperf(out string) (float64, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if v, err := strconv.ParseFloat(strings.TrimSpace(lines[i]), 64); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("no THROUGHPUT figure in netperf output %q", out)
}

// planeRuns is a data plane and the scenarios it is measured in.
type planeRuns struct {
	plane string
	scen  []scenario
}

// measure runs every test of every scenario o.runs times, in rounds: each
// round runs every scenario and test once, so the runs of one figure are
// minutes apart, not back to back. On a shared 2-CPU machine a burst of
// background work (a kubelet's housekeeping, another tenant) lasts tens
// of seconds: run back to back, all of one figure's runs fell into it and
// the whole figure moved (session 18's report had three figures where
// every nodenet run lay below every upstream run, each beside figures of
// the same planes that did not move); spread over the rounds, a burst
// costs one run of several figures, which the medians absorb.
//
// With two planes (both data planes on one cluster, -one-cluster), each
// figure's run on one plane is followed by the same figure's run on the
// other, the order swapped every round, so the two planes' runs of a
// figure are seconds apart and whatever the machine does falls on both;
// the first plane's results carry the second's runs (Result.Beside).
// Every plane must have the same scenarios, in the same order.
// Only figures with all their runs are returned.
func (k *kcluster) measure(ctx context.Context, o options, planes ...planeRuns) ([]report.Result, error) {
	// groups[i][j] is the i-th scenario and test on plane j.
	var groups [][]*figure
	for si, s := range planes[0].scen {
		for _, t := range netperfTests {
			var g []*figure
			for _, p := range planes {
				if len(p.scen) != len(planes[0].scen) || p.scen[si].name != s.name {
					return nil, fmt.Errorf("planes %s and %s have different scenarios", planes[0].plane, p.plane)
				}
				g = append(g, &figure{s: p.scen[si], r: report.Result{Dataplane: p.plane, Scenario: s.name, Test: t.name, Unit: t.unit},
					conntrack: counterTally{}, hostRouting: counterTally{},
					// What nodenet's host routing programs did with the
					// runs' packets, on the client's and the server's nodes.
					hostRoutingNodes: k.hostRoutingNodes(p.plane, p.scen[si].nodes)})
			}
			groups = append(groups, g)
		}
	}
	var err error
rounds:
	for i := 0; i < o.runs; i++ {
		for _, g := range groups {
			for j := range g {
				f := g[j]
				if i%2 == 1 {
					f = g[len(g)-1-j]
				}
				if err = k.runOnce(ctx, o, f); err != nil {
					break rounds
				}
			}
		}
	}
	var res []report.Result
	for j, p := range planes {
		for _, g := range groups {
			f := g[j]
			if len(f.r.Values) < o.runs {
				continue
			}
			r := f.r
			r.Conntrack = f.conntrack.lines(conntrackCounters)
			r.HostRouting = f.hostRouting.lines(hostRoutingOutcomes)
			if len(r.Conntrack) > 0 {
				k.p.note("%-28s %-22s %-10s conntrack: %s", p.plane, r.Scenario, r.Test, strings.Join(r.Conntrack, "; "))
			}
			if len(r.HostRouting) > 0 {
				k.p.note("%-28s %-22s %-10s host routing: %s", p.plane, r.Scenario, r.Test, strings.Join(r.HostRouting, "; "))
			}
			k.p.note("%-28s %-22s %-10s median %s %s (runs %v)", p.plane, r.Scenario, r.Test, strconv.FormatFloat(report.Median(r.Values), 'f', 1, 64), r.Unit, r.Values)
			if len(r.Paired) > 0 {
				k.p.note("%-28s %-22s %-10s %s beside each run: %v; median ratio %.0f%%", p.plane, r.Scenario, r.Test, f.s.pair.name, r.Paired, 100*r.PairedRatio())
			}
			if j == 0 && len(g) > 1 && len(g[1].r.Values) == o.runs {
				r.Beside = &report.Alternate{Dataplane: g[1].r.Dataplane, Values: g[1].r.Values}
			}
			res = append(res, r)
		}
	}
	return res, err
}

// figure is one scenario and test of a plane while its runs are measured.
type figure struct {
	s                      scenario
	r                      report.Result
	conntrack, hostRouting counterTally
	// hostRoutingNodes are the nodes whose host routing counters are
	// read around each run.
	hostRoutingNodes []string
}

// hostRoutingNodes are the nodes of a scenario whose host routing
// programs a plane's figures are watched on: on nodenet's planes with
// --host-routing=ebpf, those of the scenario's nodes that run nodenet
// (on a cluster of both data planes, not the control plane).
func (k *kcluster) hostRoutingNodes(plane string, nodes []string) []string {
	if k.hostRouting != "ebpf" || !strings.HasPrefix(plane, nodenetName+" ") {
		return nil
	}
	var out []string
	for _, n := range nodes {
		if !k.oneCluster || n == nodenetHalf.w1 || n == nodenetHalf.w2 {
			out = append(out, n)
		}
	}
	return out
}

// runOnce runs f's test once (and its pair's right after), watching the
// counters its scenario's nodes keep: conntrack's for TCP_CRR, the host
// routing programs' on f.hostRoutingNodes.
func (k *kcluster) runOnce(ctx context.Context, o options, f *figure) error {
	run := func() error {
		v, err := k.netperf(ctx, f.s, f.r.Test, o.seconds, o.cpuBind)
		if err != nil {
			return fmt.Errorf("%s, %s, %s: %w", f.r.Dataplane, f.s.name, f.r.Test, err)
		}
		f.r.Values = append(f.r.Values, v)
		if f.s.pair == nil {
			return nil
		}
		pv, err := k.netperf(ctx, *f.s.pair, f.r.Test, o.seconds, o.cpuBind)
		if err != nil {
			return fmt.Errorf("%s, %s beside %s, %s: %w", f.r.Dataplane, f.s.pair.name, f.s.name, f.r.Test, err)
		}
		f.r.Paired = append(f.r.Paired, pv)
		return nil
	}
	if len(f.hostRoutingNodes) > 0 {
		inner := run
		run = func() error { return f.hostRouting.watch(ctx, f.hostRoutingNodes, hostRoutingCounts, inner) }
	}
	if f.r.Test == "TCP_CRR" && len(f.s.nodes) > 0 {
		inner := run
		run = func() error { return f.conntrack.watch(ctx, f.s.nodes, conntrackStats, inner) }
	}
	return run()
}

// bench measures, for each backend of o.backends on a fresh cluster, every
// proxy mode of o.modes, and the node-to-node baseline once; then writes
// the results and the report. Results measured before a failure are kept.
func (k *kcluster) bench(ctx context.Context, o options, repo string) error {
	data := report.Data{Date: time.Now().UTC().Format("2006-01-02 15:04 MST"),
		Command: fmt.Sprintf("make bench-kind (go run ./bench/kind bench -backend %s -proxy-modes %s -upstream-modes %s -host-routing %s -runs %d -seconds %d%s -settle %s -settle-load %g -cpu-bind %s%s)",
			strings.Join(o.backends, ","), strings.Join(o.modes, ","), upstreamModesArg(o.upstream), o.hostRouting, o.runs, o.seconds, servicesArg(o.services), o.settle, o.settleLoad, cpuBindArg(o.cpuBind), oneClusterArg(o.oneCluster)),
		Machine:  machine(),
		Versions: versions(),
		Services: o.services, HostRouting: o.hostRouting}
	var earlier *report.Data
	if o.add {
		d, err := report.Load(o.data)
		if err != nil {
			return fmt.Errorf("-add: %w", err)
		}
		if d.Services != o.services {
			return fmt.Errorf("-add: %s was measured with %d filler Services, this run has -services %d: figures at two scales do not go in one report", o.data, d.Services, o.services)
		}
		if d.HostRoutingOrKernel() != o.hostRouting {
			return fmt.Errorf("-add: %s was measured with nodenet's --host-routing=%s, this run has -host-routing %s: one report holds one", o.data, d.HostRoutingOrKernel(), o.hostRouting)
		}
		earlier = &d
	}
	var err error
	for i, backend := range o.backends {
		if err = k.benchBackend(ctx, o, repo, backend, i == 0 && earlier == nil, &data); err != nil {
			break
		}
	}
	if err != nil && len(data.Results) > 0 {
		// The report must say the run is partial, and where it stopped.
		data.Notes = append(data.Notes, fmt.Sprintf("the run stopped: %v; the data planes after that point were not measured", err))
	}
	if len(data.Results) > 0 {
		if earlier != nil {
			data = report.Merge(*earlier, data)
		}
		if werr := writeData(o.data, data); werr != nil {
			return werr
		}
		if rerr := writeReport(o); rerr != nil {
			return rerr
		}
	}
	return err
}

// benchBackend measures one backend: nodenet's modes on a fresh cluster
// (and the baseline there, if asked), then upstream's on another.
func (k *kcluster) benchBackend(ctx context.Context, o options, repo, backend string, baseline bool, data *report.Data) error {
	if o.oneCluster {
		return k.benchOneCluster(ctx, o, repo, backend, baseline, data)
	}
	if err := k.benchPlane(ctx, o, repo, "nodenet", backend, o.modes, baseline, data); err != nil {
		return err
	}
	if len(o.upstream) == 0 {
		return nil
	}
	return k.benchPlane(ctx, o, repo, upstreamName, backend, o.upstream, false, data)
}

// deployBench loads the bench image into the nodes, applies the bench
// workload manifest and waits for its pods.
func (k *kcluster) deployBench(ctx context.Context, label, manifest string) error {
	if err := k.load(ctx, k.b.benchImage); err != nil {
		return err
	}
	return k.p.step(ctx, label, func(ctx context.Context) error {
		if err := k.apply(ctx, manifest); err != nil {
			return err
		}
		return k.waitPods(ctx, benchNS, "pod")
	})
}

// benchPlane brings up a cluster with the data plane dp and measures each
// of its modes, checking traffic before each.
func (k *kcluster) benchPlane(ctx context.Context, o options, repo, dp, backend string, modes []string, baseline bool, data *report.Data) error {
	modes, notes, err := k.bringUp(ctx, repo, dp, backend, modes)
	data.Notes = append(data.Notes, notes...)
	if err != nil {
		return err
	}
	if err := k.deployBench(ctx, "bench workload (netserver + iperf3 pods, NodePort Service)", benchWorkload(wholeCluster)); err != nil {
		return err
	}
	pods, base, err := k.scenarios(ctx, wholeCluster)
	if err != nil {
		return err
	}
	if o.services > 0 {
		if err := k.createFillers(ctx, o.services); err != nil {
			return err
		}
	}
	if baseline {
		if err := k.measureStep(ctx, o, report.Baseline, data, planeRuns{report.Baseline, base}); err != nil {
			return err
		}
	}
	for i, m := range modes {
		if i > 0 {
			if err := k.switchMode(ctx, dp, m); err != nil {
				return err
			}
		}
		plane := planeName(dp, backend, m)
		if err := k.checkTraffic(ctx, plane, wholeCluster); err != nil {
			return err
		}
		if o.services > 0 {
			if err := k.waitFillers(ctx, o.services, plane); err != nil {
				return err
			}
		}
		if err := k.measureStep(ctx, o, plane, data, planeRuns{plane, pods}); err != nil {
			return err
		}
	}
	return nil
}

// measureStep waits for the machine to settle, then measures the planes
// (measure, label naming them in the progress and the notes) and adds
// their results to data, but none of a data plane data already has
// results of: kube-proxy iptables measured a second time beside nodenet's
// ebpf on one cluster stays in that result's Beside, not as a second
// column of the report.
func (k *kcluster) measureStep(ctx context.Context, o options, label string, data *report.Data, planes ...planeRuns) error {
	if err := k.settle(ctx, o, label, data); err != nil {
		return err
	}
	return k.p.step(ctx, "netperf: "+label, func(ctx context.Context) error {
		defer noteLoad(data, label)()
		had := map[string]bool{}
		for _, h := range data.Results {
			had[h.Dataplane] = true
		}
		r, err := k.measure(ctx, o, planes...)
		for _, x := range r {
			if !had[x.Dataplane] {
				data.Results = append(data.Results, x)
			}
		}
		return err
	})
}

// settle waits for the machine to go quiet before plane is measured
// (settle.go) and notes in d what the wait did.
func (k *kcluster) settle(ctx context.Context, o options, plane string, d *report.Data) error {
	if o.settle == 0 {
		return nil
	}
	return k.p.step(ctx, fmt.Sprintf("wait for the load average to fall to %.2f (at most %s)", o.settleLoad, o.settle), func(ctx context.Context) error {
		r, err := settleWait{max: o.settle, target: o.settleLoad, poll: 5 * time.Second, load: procLoadAverage}.wait(ctx)
		if err != nil {
			return err
		}
		if n := r.note(plane, o.settleLoad, o.settle); n != "" {
			d.Notes = append(d.Notes, n)
		}
		return ctx.Err()
	})
}

// noteLoad records in d's notes the machine's 1-minute load average
// before and after a plane's measurement (call the returned func at the
// end): the planes are measured one after another, so a reader must know
// which of them shared the machine with other work.
func noteLoad(d *report.Data, plane string) func() {
	before := loadAverage()
	return func() {
		d.Notes = append(d.Notes, fmt.Sprintf("load average (1 min) while %s was measured: %s at the start, %s at the end (%d CPUs)",
			plane, before, loadAverage(), runtime.NumCPU()))
	}
}

// loadAverage is /proc/loadavg's 1-minute figure for a note, "?" if
// unreadable.
func loadAverage() string {
	l, err := procLoadAverage()
	if err != nil {
		return "?"
	}
	return strconv.FormatFloat(l, 'f', 2, 64)
}

func servicesArg(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" -services %d", n)
}

func oneClusterArg(on bool) string {
	if on {
		return " -one-cluster"
	}
	return ""
}

func cpuBindArg(bind string) string {
	if bind == "" {
		return "none"
	}
	return bind
}

func upstreamModesArg(modes []string) string {
	if len(modes) == 0 {
		return "none"
	}
	return strings.Join(modes, ",")
}

func writeData(path string, d report.Data) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o644)
}

// writeReport regenerates the Markdown report and its charts from o.data.
func writeReport(o options) error {
	d, err := report.Load(o.data)
	if err != nil {
		return err
	}
	files, err := renderReport(d)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	for name, body := range files {
		if err := atomicfile.Write(filepath.Join(o.out, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("report: %s\n", filepath.Join(o.out, "kind-netperf.md"))
	return nil
}

// renderReport is every file of the report by name.
func renderReport(d report.Data) (map[string]string, error) {
	if len(d.Results) == 0 {
		return nil, fmt.Errorf("no results to report")
	}
	files := map[string]string{}
	charts := map[string]string{}
	for _, t := range netperfTests {
		if _, ok := findTest(d, t.name); ok {
			charts[t.name] = report.ChartFile(t.name)
			files[charts[t.name]] = report.Chart(d, t.name)
		}
	}
	files["kind-netperf.md"] = report.Markdown(d, charts)
	return files, nil
}

func findTest(d report.Data, test string) (report.Result, bool) {
	for _, r := range d.Results {
		if r.Test == test {
			return r, true
		}
	}
	return report.Result{}, false
}

// machine records what the figures were measured on.
func machine() map[string]string {
	m := map[string]string{"cpus": strconv.Itoa(runtime.NumCPU()), "arch": runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m["kernel"] = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m["memory"] = strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"))
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").Output(); err == nil {
		m["docker"] = strings.TrimSpace(string(out))
	}
	return m
}

func versions() map[string]string {
	v := map[string]string{"kubernetes": kubernetesVersion, "kind": kindVersion, "etcd": etcdVersion,
		"crictl": crictlVersion, "go": runtime.Version(), "node OS": "Debian " + debianSuite,
		"upstream flannel":    upstream.FlanneldVersion + " (flanneld; CNI plugin: nodenet-cni as /opt/cni/bin/flannel)",
		"upstream kube-proxy": kubernetesVersion}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		v["nodenet"] = strings.TrimSpace(string(out))
	}
	return v
}
