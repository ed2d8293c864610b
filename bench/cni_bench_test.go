package bench

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/ipam/hostlocal"
	"github.com/nodenet/nodenet/subnetenv"
)

// BenchmarkCNIAddDel compares nodenet-cni with Debian's bridge + host-local
// (containernetworking-plugins 1.1.1, what upstream flannel delegates to)
// on the same node subnet, driven the way a runtime drives a plugin: one
// exec per command, CNI_* variables, the configuration on stdin, from a
// thread inside a throwaway "node" namespace, a throwaway namespace per
// pod. Each implementation has its own node; they take turns, so load from
// anything else on the machine hits both alike.
//
//   - latency: -nodenet.cni.rounds sequential ADD+DEL round trips per
//     implementation, in alternating blocks of 10, one pod namespace, a
//     new container ID each time; p50/p99 of the round trip and of ADD and
//     DEL alone.
//   - throughput: -nodenet.cni.workers workers, each with its own pod
//     namespace, doing round trips until -nodenet.cni.rounds are done, in
//     two halves per implementation (A B A B); pods/s = round trips / wall
//     time, where the wall time includes waiting for nodenet-cni's
//     background reapers to finish deleting the veths.
//
// Afterwards each node's allocation store must be empty and only cni0
// left (nodenet-cni's background reapers are waited for).
var (
	flagCNIRounds  = flag.Int("nodenet.cni.rounds", 300, "ADD+DEL round trips per phase and implementation in BenchmarkCNIAddDel")
	flagCNIWorkers = flag.Int("nodenet.cni.workers", 4, "concurrent workers in the throughput phase of BenchmarkCNIAddDel")
)

const debianCNI = "/usr/lib/cni"

// cniNode is one implementation on its own node.
type cniNode struct {
	name    string
	binary  string
	cniPath string
	conf    []byte
	dataDir string
	host    *nettest.NS
	pods    []*nettest.NS
	seq     atomic.Int64

	rt, adds, dels []time.Duration
	done           int
	busy           time.Duration
}

type cniResult struct {
	RoundTrip, Add, Del Latency
	PodsPerSec          float64
}

func BenchmarkCNIAddDel(b *testing.B) {
	nettest.RequirePrivileged(b)
	nettest.RequireSysfs(b, debianCNI+"/bridge")
	rounds, workers := *flagCNIRounds, max(1, *flagCNIWorkers)
	if f := scaleFor(b).Factor; f != 1 && !flagSet("nodenet.cni.rounds") {
		rounds = max(10, int(float64(rounds)*f))
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "nodenet")
	build := exec.Command(goTool(), "build", "-o", bin, "github.com/nodenet/nodenet/cmd/nodenet-cni")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as CNI plugins ship
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build nodenet-cni: %v\n%s", err, out)
	}
	var ours, theirs cniResult
	for b.Loop() {
		subnetFile := filepath.Join(b.TempDir(), "subnet.env")
		env := subnetenv.FromSubnets(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.0/24"), netip.Prefix{}, netip.Prefix{}, 1450, true)
		if err := subnetenv.Write(subnetFile, env); err != nil {
			b.Fatal(err)
		}
		nn := newCNINode(b, "nodenet-cni", bin, dir, workers, func(dataDir string) []byte {
			return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"cbr0","type":"nodenet","subnetFile":%q,"dataDir":%q}`, subnetFile, dataDir)
		})
		// The delegate upstream flannel renders from the same subnet.env.
		up := newCNINode(b, "bridge+host-local", debianCNI+"/bridge", debianCNI, workers, func(dataDir string) []byte {
			return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"cbr0","type":"bridge","bridge":"cni0","isGateway":true,"isDefaultGateway":true,"hairpinMode":true,"ipMasq":false,"mtu":1450,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`, dataDir)
		})
		nodes := []*cniNode{nn, up}
		// Blocks of round trips, so one implementation's background work
		// (nodenet-cni's reapers) never lands in the other's measurements.
		const block = 10
		for done := 0; done < rounds; done += block {
			for _, n := range nodes {
				for range min(block, rounds-done) {
					n.latencyRound(b)
				}
				n.settle(b)
			}
		}
		for half := range 2 {
			for _, n := range nodes {
				n.throughput(b, rounds/2+half*(rounds%2))
			}
		}
		for _, n := range nodes {
			n.checkClean(b)
		}
		ours, theirs = nn.result(), up.result()
	}
	for _, r := range []struct {
		name string
		res  cniResult
	}{{"nodenet-cni", ours}, {"bridge+host-local", theirs}} {
		b.Logf("%s: round trip %v", r.name, r.res.RoundTrip)
		b.Logf("%s: ADD %v", r.name, r.res.Add)
		b.Logf("%s: DEL %v", r.name, r.res.Del)
		b.Logf("%s: %.0f pods/s with %d workers", r.name, r.res.PodsPerSec, workers)
	}
	speedup := float64(theirs.RoundTrip.P50) / float64(ours.RoundTrip.P50)
	b.Logf("nodenet-cni vs bridge+host-local: p50 %.1fx faster, p99 %.1fx, throughput %.1fx",
		speedup, float64(theirs.RoundTrip.P99)/float64(ours.RoundTrip.P99), ours.PodsPerSec/theirs.PodsPerSec)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(Ms(ours.RoundTrip.P50), "nodenet-p50-ms")
	b.ReportMetric(Ms(ours.RoundTrip.P99), "nodenet-p99-ms")
	b.ReportMetric(ours.PodsPerSec, "nodenet-pods/s")
	b.ReportMetric(Ms(theirs.RoundTrip.P50), "bridge-p50-ms")
	b.ReportMetric(Ms(theirs.RoundTrip.P99), "bridge-p99-ms")
	b.ReportMetric(theirs.PodsPerSec, "bridge-pods/s")
	b.ReportMetric(speedup, "p50-speedup-x")
}

func newCNINode(b *testing.B, name, binary, cniPath string, workers int, conf func(dataDir string) []byte) *cniNode {
	dataDir := filepath.Join(b.TempDir(), "networks")
	n := &cniNode{name: name, binary: binary, cniPath: cniPath, conf: conf(dataDir), dataDir: dataDir, host: nettest.New(b)}
	for range workers {
		n.pods = append(n.pods, nettest.New(b))
	}
	// Warm up: create cni0 and fault the binaries in.
	if err := n.host.Do(func() error { _, _, err := n.roundTrip(n.pods[0]); return err }); err != nil {
		b.Fatalf("%s warm-up: %v", name, err)
	}
	return n
}

// roundTrip runs on a thread inside n.host, so the plugin (a child of that
// thread) acts in the node's namespace.
func (n *cniNode) roundTrip(pod *nettest.NS) (add, del time.Duration, err error) {
	id := fmt.Sprintf("bench-%d", n.seq.Add(1))
	if add, err = n.exec("ADD", id, pod.Path()); err != nil {
		return 0, 0, err
	}
	del, err = n.exec("DEL", id, pod.Path())
	return add, del, err
}

func (n *cniNode) latencyRound(b *testing.B) {
	err := n.host.Do(func() error {
		a, d, err := n.roundTrip(n.pods[0])
		n.adds, n.dels, n.rt = append(n.adds, a), append(n.dels, d), append(n.rt, a+d)
		return err
	})
	if err != nil {
		b.Fatalf("%s: %v", n.name, err)
	}
}

func (n *cniNode) throughput(b *testing.B, count int) {
	var left atomic.Int64
	left.Store(int64(count))
	var wg sync.WaitGroup
	errs := make([]error, len(n.pods))
	start := time.Now()
	for w, pod := range n.pods {
		wg.Go(func() {
			errs[w] = n.host.Do(func() error {
				for left.Add(-1) >= 0 {
					if _, _, err := n.roundTrip(pod); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	wg.Wait()
	n.settle(b)
	n.busy += time.Since(start)
	n.done += count
	for _, err := range errs {
		if err != nil {
			b.Fatalf("%s throughput: %v", n.name, err)
		}
	}
}

func (n *cniNode) checkClean(b *testing.B) {
	s, err := hostlocal.Open(n.dataDir, "cbr0")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if res, err := s.Reservations(); err != nil || len(res) != 0 {
		b.Fatalf("%s left reservations: %v %v", n.name, res, err)
	}
	n.settle(b)
}

// settle waits until every pod's veth pair is gone from the node (lo and
// cni0 are left).
func (n *cniNode) settle(b *testing.B) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		links, err := n.host.Handle().LinkList()
		if err == nil && len(links) == 2 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s left links (%d, want lo and cni0): %v", n.name, len(links), err)
		}
	}
}

func (n *cniNode) result() cniResult {
	return cniResult{RoundTrip: Summarize(n.rt), Add: Summarize(n.adds), Del: Summarize(n.dels), PodsPerSec: PerSecond(n.done, n.busy)}
}

func (n *cniNode) exec(command, id, netns string) (time.Duration, error) {
	cmd := exec.Command(n.binary)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + netns,
		"CNI_IFNAME=eth0", "CNI_PATH=" + n.cniPath, "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = bytes.NewReader(n.conf)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%s %s %s: %v: %s %s", n.name, command, id, err, out.Bytes(), stderr.Bytes())
	}
	return took, nil
}
