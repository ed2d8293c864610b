package nodeipam

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/nodenet/nodenet/internal/testapi"
)

const waitLong = 45 * time.Second

// running is one controller instance with its own client, informers and
// event broadcaster, as after a process restart.
type running struct {
	c       *Controller
	cancel  context.CancelFunc
	done    chan struct{}
	patches atomic.Int64 // PATCH requests to nodes sent by this instance
}

// stop cancels the instance and waits for Run to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(waitLong):
		t.Fatal("Run did not return after cancel")
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// startController runs a new controller against s. before, if set, runs
// ahead of every request the controller's client sends.
func startController(t *testing.T, s *testapi.Server, opts Options, before func(*http.Request)) *running {
	t.Helper()
	r := &running{done: make(chan struct{})}
	cfg := rest.CopyConfig(s.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch {
				r.patches.Add(1)
			}
			if before != nil {
				before(req)
			}
			return rt.RoundTrip(req)
		})
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	t.Cleanup(func() { r.stop(t) })

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	t.Cleanup(broadcaster.Shutdown)
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nodeipam"})

	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := New(client, factory, opts, recorder, testapi.Logger())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.c = c
	factory.Start(ctx.Done())
	go func() {
		defer close(r.done)
		c.Run(ctx, 4)
		factory.Shutdown()
	}()
	return r
}

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// createNodes creates the named Nodes with the given concurrency.
func createNodes(t *testing.T, client kubernetes.Interface, names []string, workers int) {
	t.Helper()
	if err := tryCreateNodes(testapi.Context(t), client, names, workers); err != nil {
		t.Fatal(err)
	}
}

// tryCreateNodes is createNodes for goroutines other than the test's.
func tryCreateNodes(ctx context.Context, client kubernetes.Interface, names []string, workers int) error {
	ch := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for range workers {
		wg.Go(func() {
			for name := range ch {
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
				if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create node %s: %w", name, err)
				}
			}
		})
	}
	for _, n := range names {
		ch <- n
	}
	close(ch)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func names(from, to int) []string {
	var n []string
	for i := from; i < to; i++ {
		n = append(n, nodeName(i))
	}
	return n
}

// assigned lists the Nodes and returns the podCIDRs of those that have them.
func assigned(t *testing.T, client kubernetes.Interface) map[string][]string {
	t.Helper()
	list, err := client.CoreV1().Nodes().List(testapi.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	m := map[string][]string{}
	for _, n := range list.Items {
		if len(n.Spec.PodCIDRs) > 0 {
			m[n.Name] = n.Spec.PodCIDRs
			if n.Spec.PodCIDR != n.Spec.PodCIDRs[0] {
				t.Errorf("node %s: podCIDR %q != podCIDRs[0] %q", n.Name, n.Spec.PodCIDR, n.Spec.PodCIDRs[0])
			}
		}
	}
	return m
}

// waitAssigned waits until every Node in want has podCIDRs and returns all
// assignments.
func waitAssigned(t *testing.T, client kubernetes.Interface, want []string) map[string][]string {
	t.Helper()
	var got map[string][]string
	testapi.Eventually(t, waitLong, fmt.Sprintf("podCIDRs on %d nodes", len(want)), func() bool {
		got = assigned(t, client)
		for _, n := range want {
			if _, ok := got[n]; !ok {
				return false
			}
		}
		return true
	})
	return got
}

// checkDistinct fails unless every CIDR of every Node is one /mask of its
// family's cluster CIDR (clusters in family order) and no two are equal.
func checkDistinct(t *testing.T, got map[string][]string, clusters []string, masks []int) {
	t.Helper()
	seen := map[string]string{}
	for node, cidrs := range got {
		if len(cidrs) != len(clusters) {
			t.Errorf("node %s: podCIDRs %v, want %d", node, cidrs, len(clusters))
			continue
		}
		for i, s := range cidrs {
			p := netip.MustParsePrefix(s)
			cl := netip.MustParsePrefix(clusters[i])
			if !cl.Contains(p.Addr()) || p.Bits() != masks[i] || p.Masked() != p {
				t.Errorf("node %s: podCIDRs[%d] = %s, want a /%d of %s", node, i, s, masks[i], cl)
			}
			if other, dup := seen[s]; dup {
				t.Errorf("%s assigned to both %s and %s", s, other, node)
			}
			seen[s] = node
		}
	}
}

func deleteNodes(t *testing.T, client kubernetes.Interface, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := client.CoreV1().Nodes().Delete(testapi.Context(t), n, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete node %s: %v", n, err)
		}
	}
}

// events returns the reasons of Events about node.
func events(t *testing.T, client kubernetes.Interface, node string) []string {
	t.Helper()
	list, err := client.CoreV1().Events("").List(testapi.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var reasons []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == node {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}
