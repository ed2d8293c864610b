package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Annotations the watch fan-out scenario writes into each update.
const (
	RunAnnotation  = "bench.nodenet.io/run"  // one random id per scenario run
	SeqAnnotation  = "bench.nodenet.io/seq"  // the update's index
	SentAnnotation = "bench.nodenet.io/sent" // time.Now().UnixNano() at write start
)

// parallel runs fn(i) for every i in [0, n) on workers goroutines, stops at
// the first error, and returns how long each call took.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) ([]time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers = max(1, min(workers, n))
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				start := time.Now()
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return lat, nil
}

// EnsureNamespace creates namespace ns unless it exists.
func EnsureNamespace(ctx context.Context, c kubernetes.Interface, ns string) error {
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	return nil
}

// ServiceName is the name of the i-th benchmark Service.
func ServiceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// BenchService is the i-th benchmark Service: ClusterIP (allocated by the
// server), one TCP port, a selector — what a typical workload has.
func BenchService(i int) *corev1.Service {
	name := ServiceName(i)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name, "bench.nodenet.io/scenario": "apiserver"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// BenchSlice is the EndpointSlice of the i-th benchmark Service: three ready
// IPv4 endpoints on three nodes, one port.
func BenchSlice(i int) *discoveryv1.EndpointSlice {
	name := ServiceName(i)
	ready := true
	eps := make([]discoveryv1.Endpoint, 3)
	for j := range eps {
		ip := fmt.Sprintf("10.%d.%d.%d", 128+j, (i/250)%250, i%250+1)
		node := fmt.Sprintf("node-%d", (i+j)%50)
		eps[j] = discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &node,
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: fmt.Sprintf("%s-pod-%d", name, j)},
		}
	}
	port, proto, pname := int32(8080), corev1.ProtocolTCP, "http"
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bench", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "nodenet-bench"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
}

// CreateOptions configure CreateObjects.
type CreateOptions struct {
	Namespace string
	// N Services, then N EndpointSlices, from N concurrent Workers.
	N, Workers int
	// SkipSlices creates the Services only (for scenarios that only need them).
	SkipSlices bool
}

// Phase is the outcome of creating one kind of object.
type Phase struct {
	Kind    string
	N       int
	Elapsed time.Duration
	PerSec  float64
	// Latency is per create request, from send to response.
	Latency Latency
}

func (p Phase) String() string {
	return fmt.Sprintf("%d %s in %.2fs = %.0f objects/s; per request %v", p.N, p.Kind, p.Elapsed.Seconds(), p.PerSec, p.Latency)
}

// CreateResult is the outcome of CreateObjects.
type CreateResult struct {
	Services, Slices Phase
}

// CreateObjects creates opts.N Services and then opts.N EndpointSlices in
// opts.Namespace, each phase from opts.Workers goroutines sharing client c,
// and times each phase.
func CreateObjects(ctx context.Context, c kubernetes.Interface, opts CreateOptions) (*CreateResult, error) {
	if err := EnsureNamespace(ctx, c, opts.Namespace); err != nil {
		return nil, err
	}
	res := &CreateResult{}
	run := func(p *Phase, kind string, create func(ctx context.Context, i int) error) error {
		start := time.Now()
		lat, err := parallel(ctx, opts.N, opts.Workers, create)
		if err != nil {
			return fmt.Errorf("create %s: %w", kind, err)
		}
		elapsed := time.Since(start)
		*p = Phase{Kind: kind, N: opts.N, Elapsed: elapsed, PerSec: PerSecond(opts.N, elapsed), Latency: Summarize(lat)}
		return nil
	}
	err := run(&res.Services, "Services", func(ctx context.Context, i int) error {
		_, err := c.CoreV1().Services(opts.Namespace).Create(ctx, BenchService(i), metav1.CreateOptions{})
		return err
	})
	if err != nil || opts.SkipSlices {
		return res, err
	}
	err = run(&res.Slices, "EndpointSlices", func(ctx context.Context, i int) error {
		_, err := c.DiscoveryV1().EndpointSlices(opts.Namespace).Create(ctx, BenchSlice(i), metav1.CreateOptions{})
		return err
	})
	return res, err
}

// ListOptions configure ListServices.
type ListOptions struct {
	Namespace string
	// Expect is the number of Services each list must return.
	Expect int
	// Runs per mode.
	Runs int
	// PageSize for the paged mode.
	PageSize int64
}

// ListMode is the outcome of one way of listing.
type ListMode struct {
	Name string
	// Latency per full list: time to the last byte of the response, summed
	// over the pages of a paged list (decoding in the client excluded).
	Latency Latency
	Items   int // per list
	Pages   int // per list
	Bytes   int // per list, JSON
}

func (m ListMode) String() string {
	return fmt.Sprintf("%-36s %d items, %d page(s), %.1f MiB: %v", m.Name, m.Items, m.Pages, MiB(uint64(m.Bytes)), m.Latency)
}

// ListResult is the outcome of ListServices.
type ListResult struct {
	Etcd, Cache, Paged ListMode
}

// ListServices lists the Services of a namespace opts.Runs times in each of
// three ways: resourceVersion="" (a consistent read from etcd),
// resourceVersion="0" (served from the watch cache) and resourceVersion=""
// with limit=opts.PageSize (pages from etcd, following continue tokens). The
// requests are sent one at a time; each response is read in full before the
// clock stops, and checked (item count) afterwards.
func ListServices(ctx context.Context, c kubernetes.Interface, opts ListOptions) (*ListResult, error) {
	res := &ListResult{}
	modes := []struct {
		m     *ListMode
		name  string
		rv    string
		limit int64
	}{
		{&res.Etcd, `resourceVersion="" (etcd)`, "", 0},
		{&res.Cache, `resourceVersion="0" (watch cache)`, "0", 0},
		{&res.Paged, fmt.Sprintf(`resourceVersion="" limit=%d (etcd)`, opts.PageSize), "", opts.PageSize},
	}
	for _, mode := range modes {
		lat := make([]time.Duration, 0, opts.Runs)
		for range opts.Runs {
			elapsed, items, pages, bytes, err := listOnce(ctx, c, opts.Namespace, mode.rv, mode.limit)
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", mode.name, err)
			}
			if items != opts.Expect {
				return nil, fmt.Errorf("list %s returned %d Services, want %d", mode.name, items, opts.Expect)
			}
			if mode.limit > 0 && opts.Expect > 0 {
				if want := int((int64(opts.Expect) + mode.limit - 1) / mode.limit); pages != want {
					return nil, fmt.Errorf("list %s took %d pages, want %d", mode.name, pages, want)
				}
			}
			lat = append(lat, elapsed)
			*mode.m = ListMode{Name: mode.name, Items: items, Pages: pages, Bytes: bytes}
		}
		mode.m.Latency = Summarize(lat)
	}
	return res, nil
}

func listOnce(ctx context.Context, c kubernetes.Interface, ns, rv string, limit int64) (elapsed time.Duration, items, pages, bytes int, err error) {
	cont := ""
	for {
		req := c.CoreV1().RESTClient().Get().Namespace(ns).Resource("services")
		if rv != "" {
			req = req.Param("resourceVersion", rv)
		}
		if limit > 0 {
			req = req.Param("limit", strconv.FormatInt(limit, 10))
		}
		if cont != "" {
			req = req.Param("continue", cont)
		}
		start := time.Now()
		body, err := req.DoRaw(ctx)
		elapsed += time.Since(start)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		var list corev1.ServiceList
		if err := json.Unmarshal(body, &list); err != nil {
			return 0, 0, 0, 0, fmt.Errorf("decode ServiceList: %w", err)
		}
		items += len(list.Items)
		pages++
		bytes += len(body)
		if cont = list.Continue; cont == "" {
			return elapsed, items, pages, bytes, nil
		}
		if pages > 1_000_000 {
			return 0, 0, 0, 0, errors.New("list does not end")
		}
	}
}

// WatchOptions configure WatchFanout.
type WatchOptions struct {
	Namespace string
	// Targets are the Services updated, round-robin (update i patches
	// Targets[i%len(Targets)]).
	Targets []string
	// Watchers concurrent watches, each through a client from NewClient
	// (its own connection, as separate nodes would have).
	Watchers  int
	NewClient func() (kubernetes.Interface, error)
	// Updates written by Writers goroutines through Writer.
	Updates, Writers int
	Writer           kubernetes.Interface
	// DrainTimeout bounds the wait for events after the last write is
	// acknowledged (default 2 minutes); what has not arrived by then is lost.
	DrainTimeout time.Duration
}

// WatchResult is the outcome of WatchFanout.
type WatchResult struct {
	Watchers, Updates int
	// Expected = Watchers × Updates; Received counts distinct updates seen
	// (summed over watchers), Lost = Expected − Received.
	Expected, Received, Lost, Duplicates int64
	// ClosedEarly counts watches that ended before they had every update;
	// WatchErrors holds what they said.
	ClosedEarly int
	WatchErrors []string
	// Writes: wall time from the first write's start to the last write's
	// acknowledgement, the resulting rate, and per-write latency (start →
	// PATCH response).
	WriteElapsed time.Duration
	WritesPerSec float64
	WriteLatency Latency
	// Delivery is the latency of every received event, from the start of
	// its write (the UnixNano in SentAnnotation) to the moment the watcher
	// has it decoded from its client-go watch channel.
	Delivery Latency
	// Elapsed is from the first write's start to the last event received;
	// Drain from the last acknowledgement to the last event received.
	Elapsed, Drain time.Duration
	// EventsPerSec is Received / Elapsed: the delivered fan-out rate.
	EventsPerSec float64
}

func (r *WatchResult) String() string {
	return fmt.Sprintf("%d watchers × %d updates: received %d/%d (lost %d, duplicates %d, watches closed early %d)\n"+
		"  writes:   %.2fs = %.0f writes/s; per write %v\n"+
		"  delivery (write start → event at watcher): %v\n"+
		"  all events in %.2fs (%.0f events/s); drain after last ack %.2fs",
		r.Watchers, r.Updates, r.Received, r.Expected, r.Lost, r.Duplicates, r.ClosedEarly,
		r.WriteElapsed.Seconds(), r.WritesPerSec, r.WriteLatency,
		r.Delivery, r.Elapsed.Seconds(), r.EventsPerSec, r.Drain.Seconds())
}

type watcherState struct {
	recv      []int64 // per update: receipt UnixNano, 0 = not yet
	sent      []int64 // per update: SentAnnotation
	got       int
	dups      int
	lastRecv  int64
	closedErr string
}

// WatchFanout opens opts.Watchers watches on the Services of a namespace, all
// from the same resourceVersion, then writes opts.Updates merge patches (each
// setting RunAnnotation, SeqAnnotation and SentAnnotation) and measures when
// each watcher receives each update.
func WatchFanout(ctx context.Context, opts WatchOptions) (*WatchResult, error) {
	if len(opts.Targets) == 0 || opts.Updates <= 0 || opts.Watchers <= 0 {
		return nil, errors.New("watch fan-out needs targets, updates and watchers")
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 2 * time.Minute
	}
	runID := rand.String(8)
	// Watch from the current revision: no replay of existing objects, and
	// no update can slip in between the watches' starts.
	cur, err := opts.Writer.CoreV1().Services(opts.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("read current resourceVersion: %w", err)
	}
	rv := cur.ResourceVersion

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	states := make([]*watcherState, opts.Watchers)
	watches := make([]watch.Interface, opts.Watchers)
	defer func() {
		for _, w := range watches {
			if w != nil {
				w.Stop()
			}
		}
	}()
	timeout := int64(3600)
	for i := range watches {
		c, err := opts.NewClient()
		if err != nil {
			return nil, err
		}
		// Watch returns once the server has sent the response headers, i.e.
		// after it has registered the watcher.
		w, err := c.CoreV1().Services(opts.Namespace).Watch(wctx, metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &timeout})
		if err != nil {
			return nil, fmt.Errorf("start watch %d: %w", i, err)
		}
		watches[i] = w
		states[i] = &watcherState{recv: make([]int64, opts.Updates), sent: make([]int64, opts.Updates)}
	}
	var wg sync.WaitGroup
	for i, w := range watches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			consume(wctx, w, states[i], runID, opts.Updates)
		}()
	}
	allDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(allDone)
	}()

	// Writers.
	acked := make([]time.Duration, opts.Updates)
	firstStart := time.Now()
	lat, err := parallel(ctx, opts.Updates, opts.Writers, func(ctx context.Context, i int) error {
		start := time.Now()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q,%q:%q}}}`,
			RunAnnotation, runID, SeqAnnotation, strconv.Itoa(i), SentAnnotation, strconv.FormatInt(start.UnixNano(), 10))
		name := opts.Targets[i%len(opts.Targets)]
		if _, err := opts.Writer.CoreV1().Services(opts.Namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patch %s: %w", name, err)
		}
		acked[i] = time.Since(firstStart)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var lastAck time.Duration
	for _, a := range acked {
		lastAck = max(lastAck, a)
	}
	select {
	case <-allDone:
	case <-time.After(opts.DrainTimeout):
		wcancel()
		<-allDone
	case <-ctx.Done():
		wcancel()
		<-allDone
		return nil, ctx.Err()
	}

	res := &WatchResult{
		Watchers: opts.Watchers, Updates: opts.Updates,
		Expected:     int64(opts.Watchers) * int64(opts.Updates),
		WriteElapsed: lastAck, WritesPerSec: PerSecond(opts.Updates, lastAck),
		WriteLatency: Summarize(lat),
	}
	delivery := make([]time.Duration, 0, res.Expected)
	var lastRecv int64
	for _, st := range states {
		res.Received += int64(st.got)
		res.Duplicates += int64(st.dups)
		if st.got < opts.Updates {
			res.ClosedEarly++
			if st.closedErr != "" && len(res.WatchErrors) < 5 {
				res.WatchErrors = append(res.WatchErrors, st.closedErr)
			}
		}
		lastRecv = max(lastRecv, st.lastRecv)
		for seq, r := range st.recv {
			if r != 0 {
				delivery = append(delivery, time.Duration(r-st.sent[seq]))
			}
		}
	}
	res.Lost = res.Expected - res.Received
	res.Delivery = Summarize(delivery)
	if lastRecv > 0 {
		res.Elapsed = time.Duration(lastRecv - firstStart.UnixNano())
		res.Drain = max(0, res.Elapsed-lastAck)
		res.EventsPerSec = PerSecond(int(res.Received), res.Elapsed)
	}
	return res, nil
}

// consume reads one watch until it has every update of this run, it ends, or
// ctx is done.
func consume(ctx context.Context, w watch.Interface, st *watcherState, runID string, updates int) {
	ch := w.ResultChan()
	for st.got < updates {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-ch:
		case <-ctx.Done():
			st.closedErr = "gave up waiting: " + ctx.Err().Error()
			return
		}
		now := time.Now().UnixNano()
		if !ok {
			st.closedErr = "watch channel closed"
			return
		}
		if ev.Type == watch.Error {
			st.closedErr = fmt.Sprintf("watch error: %v", apierrors.FromObject(ev.Object))
			return
		}
		svc, isSvc := ev.Object.(*corev1.Service)
		if !isSvc || ev.Type != watch.Modified || svc.Annotations[RunAnnotation] != runID {
			continue
		}
		seq, err1 := strconv.Atoi(svc.Annotations[SeqAnnotation])
		sent, err2 := strconv.ParseInt(svc.Annotations[SentAnnotation], 10, 64)
		if err1 != nil || err2 != nil || seq < 0 || seq >= updates {
			continue
		}
		if st.recv[seq] != 0 {
			st.dups++
			continue
		}
		st.recv[seq], st.sent[seq], st.lastRecv = now, sent, now
		st.got++
	}
}
