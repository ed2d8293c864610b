package bench

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodenet/nodenet/controllers/nodeipam"
	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/testapi"
)

var (
	flagIPAMNodes   = flag.Int("nodenet.ipam.nodes", 5000, "Nodes registered in the node IPAM benchmark")
	flagIPAMWorkers = flag.Int("nodenet.ipam.workers", 8, "node IPAM controller workers")
)

// nodeIPAMResult is one run of the node IPAM scenario.
type nodeIPAMResult struct {
	Nodes         int
	Create        time.Duration // first create to last create returned
	AllAssigned   time.Duration // first create to every Node seen with podCIDRs
	Patches       int64         // PATCH requests the controller sent for nodes
	StatusPatches int64         // of which to the status subresource
}

func (r nodeIPAMResult) String() string {
	return fmt.Sprintf("%d nodes: created in %v, all podCIDRs assigned %v after the first create (%.0f nodes/s); controller PATCHes %d (%d status)",
		r.Nodes, r.Create.Round(time.Millisecond), r.AllAssigned.Round(time.Millisecond),
		float64(r.Nodes)/r.AllAssigned.Seconds(), r.Patches, r.StatusPatches)
}

// BenchmarkNodeIPAM: -nodenet.ipam.nodes Nodes created by -nodenet.workers
// concurrent clients against an in-process API server while the node IPAM
// controller runs; measures the wall time from the first create until a
// watcher has seen every Node with podCIDRs, and the controller's writes.
// Run with -benchtime=1x: every iteration starts a fresh server.
func BenchmarkNodeIPAM(b *testing.B) {
	sc := scaleFor(b)
	n := sc.scaled("nodenet.ipam.nodes", *flagIPAMNodes)
	b.Logf("nodes=%d create-workers=%d controller-workers=%d (scale %g)", n, sc.Workers, *flagIPAMWorkers, sc.Factor)
	var res nodeIPAMResult
	for i := 0; i < b.N; i++ {
		res = runNodeIPAM(b, n, sc.Workers, *flagIPAMWorkers)
	}
	b.Logf("%v", res)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(res.AllAssigned.Seconds(), "assign-all-s")
	b.ReportMetric(float64(res.Nodes)/res.AllAssigned.Seconds(), "nodes/s")
	b.ReportMetric(res.Create.Seconds(), "create-s")
	b.ReportMetric(float64(res.Patches), "patches")
	b.ReportMetric(float64(res.Patches)/float64(res.Nodes), "patches/node")
}

func runNodeIPAM(b *testing.B, n, createWorkers, controllerWorkers int) nodeIPAMResult {
	b.StopTimer()
	srv := testapi.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	var patches, statusPatches atomic.Int64
	ctrlClient := kubernetes.NewForConfigOrDie(observedConfig(srv.Config, func(req *http.Request) {
		if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/nodes/") {
			patches.Add(1)
			if strings.HasSuffix(req.URL.Path, "/status") {
				statusPatches.Add(1)
			}
		}
	}))
	ctrlFactory := informers.NewSharedInformerFactory(ctrlClient, 0)
	ctrl, err := nodeipam.New(ctrlClient, ctrlFactory, nodeipam.Options{ClusterCIDRs: cidrlist.MustParse("10.128.0.0/9")}, nil, testapi.Logger())
	if err != nil {
		b.Fatal(err)
	}
	defer runController(ctx, ctrlFactory, func(ctx context.Context) { ctrl.Run(ctx, controllerWorkers) })()

	// The watcher: its own client and informer, counting Nodes with CIDRs.
	watchFactory := informers.NewSharedInformerFactory(kubernetes.NewForConfigOrDie(srv.Config), 0)
	var mu sync.Mutex
	seen := map[string]string{}
	allDone := make(chan time.Time, 1)
	note := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || len(node.Spec.PodCIDRs) == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, dup := seen[node.Name]; dup {
			return
		}
		seen[node.Name] = node.Spec.PodCIDRs[0]
		if len(seen) == n {
			allDone <- time.Now()
		}
	}
	if _, err := watchFactory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) },
	}); err != nil {
		b.Fatal(err)
	}
	defer startInformers(ctx, watchFactory)()
	if !cache.WaitForCacheSync(ctx.Done(), ctrlFactory.Core().V1().Nodes().Informer().HasSynced) {
		b.Fatal("controller cache did not sync")
	}

	b.StartTimer()
	start := time.Now()
	if err := ipamCreateNodes(ctx, srv.Client, n, createWorkers); err != nil {
		b.Fatal(err)
	}
	created := time.Since(start)
	var end time.Time
	select {
	case end = <-allDone:
	case <-ctx.Done():
		mu.Lock()
		b.Fatalf("%d of %d nodes assigned before the timeout", len(seen), n)
	}
	b.StopTimer()

	distinct := map[string]bool{}
	for _, cidr := range seen {
		distinct[cidr] = true
	}
	if len(distinct) != n {
		b.Fatalf("%d distinct podCIDRs for %d nodes", len(distinct), n)
	}
	return nodeIPAMResult{Nodes: n, Create: created, AllAssigned: end.Sub(start),
		Patches: patches.Load(), StatusPatches: statusPatches.Load()}
}

func ipamCreateNodes(ctx context.Context, client kubernetes.Interface, n, workers int) error {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-node-%05d", i)}}
				if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("create node %s: %w", node.Name, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return nil
}
