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

	"github.com/nodenet/nodenet/flanneld/subnetenv"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

// BenchmarkCNIAddDel compares nodenet-cni with Debian's bridge + host-local
// (containernetworking-plugins 1.1.1, what upstream flannel delegates to)
// on the same node subnet, driven the way a runtime drives a plugin: one
// exec per command, CNI_* variables, the configuration on stdin, from a
// thread inside a throwaway "node" namespace, a throwaway namespace per
// pod. Each implementation gets a fresh node.
//
//   - latency: -nodenet.cni.rounds sequential ADD+DEL round trips (one pod
//     namespace, a new container ID each time); p50/p99 of the round trip.
//   - throughput: -nodenet.cni.workers workers, each with its own pod
//     namespace, doing ADD+DEL round trips until -nodenet.cni.rounds are
//     done; pods/s = round trips / wall time.
//
// Afterwards the allocation store must be empty and only cni0 left.
var (
	flagCNIRounds  = flag.Int("nodenet.cni.rounds", 300, "ADD+DEL round trips per phase of BenchmarkCNIAddDel")
	flagCNIWorkers = flag.Int("nodenet.cni.workers", 4, "concurrent workers in the throughput phase of BenchmarkCNIAddDel")
)

const debianCNI = "/usr/lib/cni"

type cniImpl struct {
	name    string
	binary  string
	cniPath string
	conf    func(subnetFile, dataDir string) []byte
}

type cniResult struct {
	RoundTrip, Add, Del Latency
	PodsPerSec          float64
}

func BenchmarkCNIAddDel(b *testing.B) {
	nettest.RequirePrivileged(b)
	nettest.RequireSysfs(b, debianCNI+"/bridge")
	rounds := *flagCNIRounds
	if f := scaleFor(b).Factor; f != 1 && !flagSet("nodenet.cni.rounds") {
		rounds = max(10, int(float64(rounds)*f))
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "nodenet")
	if out, err := exec.Command(goTool(), "build", "-o", bin, "github.com/nodenet/nodenet/cmd/nodenet-cni").CombinedOutput(); err != nil {
		b.Fatalf("build nodenet-cni: %v\n%s", err, out)
	}
	impls := []cniImpl{
		{"nodenet-cni", bin, dir, func(subnetFile, dataDir string) []byte {
			return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"cbr0","type":"nodenet","subnetFile":%q,"dataDir":%q}`, subnetFile, dataDir)
		}},
		// The delegate upstream flannel renders from the same subnet.env.
		{"bridge+host-local", debianCNI + "/bridge", debianCNI, func(_, dataDir string) []byte {
			return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"cbr0","type":"bridge","bridge":"cni0","isGateway":true,"isDefaultGateway":true,"hairpinMode":true,"ipMasq":false,"mtu":1450,"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.244.1.0/24"}]],"routes":[{"dst":"10.244.0.0/16"}]}}`, dataDir)
		}},
	}
	results := map[string]cniResult{}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			var res cniResult
			for b.Loop() {
				res = runCNIScenario(b, impl, rounds, *flagCNIWorkers)
			}
			results[impl.name] = res
			b.Logf("round trip %v", res.RoundTrip)
			b.Logf("ADD %v", res.Add)
			b.Logf("DEL %v", res.Del)
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(Ms(res.RoundTrip.P50), "p50-ms")
			b.ReportMetric(Ms(res.RoundTrip.P99), "p99-ms")
			b.ReportMetric(Ms(res.Add.P50), "add-p50-ms")
			b.ReportMetric(Ms(res.Del.P50), "del-p50-ms")
			b.ReportMetric(res.PodsPerSec, "pods/s")
		})
	}
	ours, theirs := results["nodenet-cni"], results["bridge+host-local"]
	if ours.RoundTrip.P50 > 0 && theirs.RoundTrip.P50 > 0 {
		b.Logf("nodenet-cni vs bridge+host-local: p50 %.1fx faster, p99 %.1fx, throughput %.1fx",
			float64(theirs.RoundTrip.P50)/float64(ours.RoundTrip.P50),
			float64(theirs.RoundTrip.P99)/float64(ours.RoundTrip.P99),
			ours.PodsPerSec/theirs.PodsPerSec)
	}
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func runCNIScenario(b *testing.B, impl cniImpl, rounds, workers int) cniResult {
	host := nettest.New(b)
	dir := b.TempDir()
	subnetFile, dataDir := filepath.Join(dir, "subnet.env"), filepath.Join(dir, "networks")
	env := subnetenv.FromSubnets(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.0/24"), netip.Prefix{}, netip.Prefix{}, 1450, true)
	if err := subnetenv.Write(subnetFile, env); err != nil {
		b.Fatal(err)
	}
	conf := impl.conf(subnetFile, dataDir)
	pods := make([]*nettest.NS, max(1, workers))
	for i := range pods {
		pods[i] = nettest.New(b)
	}
	var seq atomic.Int64
	// roundTrip runs on a thread inside host, so the plugin (a child of
	// that thread) acts in it.
	roundTrip := func(pod *nettest.NS) (add, del time.Duration, err error) {
		id := fmt.Sprintf("bench-%d", seq.Add(1))
		if add, err = execCNI(impl, "ADD", id, pod.Path(), conf); err != nil {
			return 0, 0, err
		}
		del, err = execCNI(impl, "DEL", id, pod.Path(), conf)
		return add, del, err
	}
	// Warm up: create cni0 and fault the binaries in.
	if err := host.Do(func() error { _, _, err := roundTrip(pods[0]); return err }); err != nil {
		b.Fatalf("%s warm-up: %v", impl.name, err)
	}

	var rt, adds, dels []time.Duration
	err := host.Do(func() error {
		for range rounds {
			a, d, err := roundTrip(pods[0])
			if err != nil {
				return err
			}
			adds, dels, rt = append(adds, a), append(dels, d), append(rt, a+d)
		}
		return nil
	})
	if err != nil {
		b.Fatalf("%s: %v", impl.name, err)
	}

	var left atomic.Int64
	left.Store(int64(rounds))
	var wg sync.WaitGroup
	errs := make([]error, len(pods))
	start := time.Now()
	for w, pod := range pods {
		wg.Go(func() {
			errs[w] = host.Do(func() error {
				for left.Add(-1) >= 0 {
					if _, _, err := roundTrip(pod); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	wg.Wait()
	wall := time.Since(start)
	for _, err := range errs {
		if err != nil {
			b.Fatalf("%s throughput: %v", impl.name, err)
		}
	}

	s, err := hostlocal.Open(dataDir, "cbr0")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if res, err := s.Reservations(); err != nil || len(res) != 0 {
		b.Fatalf("%s left reservations: %v %v", impl.name, res, err)
	}
	// nodenet-cni's DEL leaves the kernel's slow unregistering of the veth
	// pair to a background reaper; wait for the reapers to finish.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		links, err := host.Handle().LinkList()
		if err == nil && len(links) == 2 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s left links (%d, want lo and cni0): %v", impl.name, len(links), err)
		}
	}
	return cniResult{RoundTrip: Summarize(rt), Add: Summarize(adds), Del: Summarize(dels), PodsPerSec: PerSecond(rounds, wall)}
}

func execCNI(impl cniImpl, command, id, netns string, conf []byte) (time.Duration, error) {
	cmd := exec.Command(impl.binary)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + netns,
		"CNI_IFNAME=eth0", "CNI_PATH=" + impl.cniPath, "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = bytes.NewReader(conf)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%s %s %s: %v: %s %s", impl.name, command, id, err, out.Bytes(), stderr.Bytes())
	}
	return took, nil
}
