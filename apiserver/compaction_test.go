package apiserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/nodenet/nodenet/apiserver"
)

// noWatchList makes a reflector list with ListFunc instead of streaming the
// initial state (client-go's WatchListClient feature, on by default), so
// the test controls what the first list returns.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

func expect410(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("%s: got %v, want 410 Expired/Gone", what, err)
	}
	if st := statusOf(t, err); st.Code != http.StatusGone {
		t.Fatalf("%s: code %d, want 410", what, st.Code)
	}
}

func TestCompactionAndWatchCacheExpiry(t *testing.T) {
	ts := startServer(t, func(c *apiserver.Config) { c.WatchCacheSize = 20 })
	ctx := ctxT(t)
	c := ts.client
	const ns = "compact"
	createNamespace(t, ts, ns)
	createNamespace(t, ts, "paged")
	cms := c.CoreV1().ConfigMaps(ns)
	for i := 0; i < 5; i++ {
		if _, err := c.CoreV1().ConfigMaps("paged").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	page1, err := c.CoreV1().ConfigMaps("paged").List(ctx, metav1.ListOptions{Limit: 2})
	if err != nil || page1.Continue == "" {
		t.Fatalf("first page: %v, continue %q", err, page1.Continue)
	}
	oldList, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldRV := oldList.ResourceVersion

	const n = 100
	var rvs []string
	for i := 0; i < n; i++ {
		cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, cm.ResourceVersion)
	}
	cur, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil || len(cur.Items) != n {
		t.Fatalf("list after writes: %v, %d items", err, len(cur.Items))
	}
	curRev, _ := strconv.ParseInt(cur.ResourceVersion, 10, 64)
	if err := ts.Compact(ctx, curRev); err != nil {
		t.Fatal(err)
	}

	t.Run("watch inside the cache window still works", func(t *testing.T) {
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: rvs[n-6]})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		for i := n - 5; i < n; i++ {
			select {
			case ev := <-w.ResultChan():
				if ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != fmt.Sprintf("cm-%03d", i) {
					t.Fatalf("event %d: %s %v", i, ev.Type, ev.Object)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("no event for cm-%03d", i)
			}
		}
	})

	t.Run("watch from a compacted resourceVersion: 200 then ERROR 410", func(t *testing.T) {
		// Raw: the HTTP status and the event as sent.
		var code int
		res := c.CoreV1().RESTClient().Get().Namespace(ns).Resource("configmaps").
			Param("watch", "true").Param("resourceVersion", oldRV).Param("timeoutSeconds", "5").Do(ctx)
		res.StatusCode(&code)
		body, err := res.Raw()
		if err != nil || code != http.StatusOK {
			t.Fatalf("watch response: code %d, err %v", code, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(body))
		if !sc.Scan() {
			t.Fatalf("empty watch stream")
		}
		var ev struct {
			Type   watch.EventType `json:"type"`
			Object metav1.Status   `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("decode %q: %v", sc.Text(), err)
		}
		if ev.Type != watch.Error || ev.Object.Code != http.StatusGone || ev.Object.Reason != metav1.StatusReasonExpired {
			t.Fatalf("first event %s: %+v, want ERROR 410 Expired", ev.Type, ev.Object)
		}
		// client-go: the same as a watch.Error event.
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: oldRV})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Stop()
		select {
		case e, ok := <-w.ResultChan():
			if !ok || e.Type != watch.Error {
				t.Fatalf("got %v %s, want an ERROR event", ok, e.Type)
			}
			expect410(t, "watch event", apierrors.FromObject(e.Object))
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
	})

	t.Run("exact list at a compacted resourceVersion", func(t *testing.T) {
		_, err := cms.List(ctx, metav1.ListOptions{ResourceVersion: oldRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		expect410(t, "exact list", err)
		// At the compaction revision itself it still works.
		l, err := cms.List(ctx, metav1.ListOptions{ResourceVersion: cur.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil || len(l.Items) != n {
			t.Fatalf("exact list at the compaction revision: %v", err)
		}
	})

	t.Run("continue token from before the compaction", func(t *testing.T) {
		_, err := c.CoreV1().ConfigMaps("paged").List(ctx, metav1.ListOptions{Limit: 2, Continue: page1.Continue})
		expect410(t, "continue", err)
	})

	t.Run("informer relists after 410", func(t *testing.T) {
		var lists atomic.Int32
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				l, err := cms.List(ctx, opts)
				if err == nil && lists.Add(1) == 1 {
					// The first list is stale: the namespace as it was at
					// oldRV, before the 100 writes.
					l.ResourceVersion, l.Items = oldRV, nil
				}
				return l, err
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return cms.Watch(ctx, opts)
			},
		}
		inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{}), &corev1.ConfigMap{}, 0, cache.Indexers{})
		stop := make(chan struct{})
		defer close(stop)
		go inf.Run(stop)
		waitFor(t, 20*time.Second, "the informer to relist and hold all 100 ConfigMaps", func() bool {
			return len(inf.GetStore().ListKeys()) == n
		})
		if got := lists.Load(); got < 2 {
			t.Fatalf("ListFunc called %d times, want a relist", got)
		}
		// And it watches from the fresh list on.
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-relist"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the informer to see a new ConfigMap", func() bool {
			_, ok, _ := inf.GetStore().GetByKey(ns + "/after-relist")
			return ok
		})
	})
}
