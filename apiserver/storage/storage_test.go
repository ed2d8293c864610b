package storage_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodenet/nodenet/apiserver/storage"
	"github.com/nodenet/nodenet/internal/testapi"
)

// The tests use the etcd of a real API server (testapi) under a prefix of
// their own, so they exercise the store and the watch cache against etcd
// itself, and nothing the server does touches their keys.

var configMapGVK = corev1.SchemeGroupVersion.WithKind("ConfigMap")

// newStore returns a ConfigMap store under a fresh prefix.
func newStore(t *testing.T) (*storage.Store, *clientv3.Client) {
	t.Helper()
	srv := testapi.Start(t)
	cl := srv.EtcdClient()
	return storage.NewStore(cl, "/storagetest/"+t.Name(), configMapGVK, func() runtime.Object { return &corev1.ConfigMap{} }), cl
}

func cm(ns, name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": value}}
}

func rv(t *testing.T, obj runtime.Object) int64 {
	t.Helper()
	acc, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(acc.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", acc.GetResourceVersion(), err)
	}
	return n
}

func value(obj runtime.Object) string { return obj.(*corev1.ConfigMap).Data["v"] }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestStoreOptimisticConcurrency(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	key := s.Key("ns", "a")
	if _, err := s.Get(ctx, key); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("get before create: %v, want ErrNotFound", err)
	}
	created, err := s.Create(ctx, key, cm("ns", "a", "1"), storage.Claims{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, key, cm("ns", "a", "again"), storage.Claims{}); !errors.Is(err, storage.ErrExists) {
		t.Errorf("second create: %v, want ErrExists", err)
	}
	got, err := s.Get(ctx, key)
	if err != nil || rv(t, got) != rv(t, created) || value(got) != "1" {
		t.Fatalf("get: %v %v, want what was created at rv %d", got, err, rv(t, created))
	}
	updated, err := s.Update(ctx, key, rv(t, created), cm("ns", "a", "2"), storage.Claims{})
	if err != nil || rv(t, updated) <= rv(t, created) {
		t.Fatalf("update: %v %v", updated, err)
	}
	// A writer that read before the update loses.
	if _, err := s.Update(ctx, key, rv(t, created), cm("ns", "a", "stale"), storage.Claims{}); !errors.Is(err, storage.ErrConflict) {
		t.Errorf("update from a stale read: %v, want ErrConflict", err)
	}
	if _, err := s.Delete(ctx, key, rv(t, created), storage.Claims{}); !errors.Is(err, storage.ErrConflict) {
		t.Errorf("delete from a stale read: %v, want ErrConflict", err)
	}
	delRev, err := s.Delete(ctx, key, rv(t, updated), storage.Claims{})
	if err != nil || delRev <= rv(t, updated) {
		t.Fatalf("delete: rev %d, %v", delRev, err)
	}
	if _, err := s.Update(ctx, key, rv(t, updated), cm("ns", "a", "3"), storage.Claims{}); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("update after delete: %v, want ErrNotFound", err)
	}
}

// TestStoreClaims: extra keys ride in the object's transaction, all or
// nothing.
func TestStoreClaims(t *testing.T) {
	s, cl := newStore(t)
	ctx := ctxT(t)
	claim := func(k string) string { return s.Prefix() + "claims/" + k }
	a, err := s.Create(ctx, s.Key("ns", "a"), cm("ns", "a", "1"), storage.Claims{Put: map[string]string{claim("10.0.0.1"): "a"}})
	if err != nil {
		t.Fatal(err)
	}
	// b wants a taken value: nothing of b is written.
	_, err = s.Create(ctx, s.Key("ns", "b"), cm("ns", "b", "1"), storage.Claims{Put: map[string]string{claim("10.0.0.1"): "b", claim("10.0.0.2"): "b"}})
	ce, ok := storage.IsClaimed(err)
	if !ok || !slices.Equal(ce.Keys, []string{claim("10.0.0.1")}) {
		t.Fatalf("create with a taken claim: %v, want a ClaimedError naming only the taken key", err)
	}
	for _, k := range []string{s.Key("ns", "b"), claim("10.0.0.2")} {
		if resp, err := cl.Get(ctx, k); err != nil || len(resp.Kvs) != 0 {
			t.Errorf("%s written by a failed transaction: %v %v", k, resp, err)
		}
	}
	// A guard: the write holds only while another key is unchanged.
	guard := s.Prefix() + "guard"
	put, err := cl.Put(ctx, guard, "x")
	if err != nil {
		t.Fatal(err)
	}
	guardRev := put.Header.Revision
	if _, err := cl.Put(ctx, guard, "y"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, s.Key("ns", "c"), cm("ns", "c", "1"), storage.Claims{Unchanged: map[string]int64{guard: guardRev}}); !errors.Is(err, storage.ErrGuardChanged) {
		t.Errorf("create with a changed guard: %v, want ErrGuardChanged", err)
	}
	// Deleting a releases its claim in the same transaction.
	if _, err := s.Delete(ctx, s.Key("ns", "a"), rv(t, a), storage.Claims{Release: []string{claim("10.0.0.1")}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := cl.Get(ctx, claim("10.0.0.1")); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("claim kept after its release: %v %v", resp, err)
	}
}

// TestStoreListPagesAtOneRevision: continue tokens read every page at the
// first page's revision, so writes in between do not show; compacted and
// future revisions are errors of their own.
func TestStoreListPagesAtOneRevision(t *testing.T) {
	s, cl := newStore(t)
	ctx := ctxT(t)
	for i := range 5 {
		if _, err := s.Create(ctx, s.Key("ns", fmt.Sprintf("o%d", i)), cm("ns", fmt.Sprintf("o%d", i), "1"), storage.Claims{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, s.Key("other", "x"), cm("other", "x", "1"), storage.Claims{}); err != nil {
		t.Fatal(err)
	}
	page, err := s.List(ctx, s.NamespacePrefix("ns"), storage.ListOptions{Limit: 2})
	if err != nil || len(page.Items) != 2 || page.Continue == "" || page.Remaining == nil || *page.Remaining != 3 {
		t.Fatalf("first page: %+v %v", page, err)
	}
	first := page.Rev
	// Written after the first page: not in this list.
	if _, err := s.Create(ctx, s.Key("ns", "o9"), cm("ns", "o9", "1"), storage.Claims{}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range page.Items {
		names = append(names, o.(*corev1.ConfigMap).Name)
	}
	for page.Continue != "" {
		if page, err = s.List(ctx, s.NamespacePrefix("ns"), storage.ListOptions{Limit: 2, Continue: page.Continue}); err != nil {
			t.Fatal(err)
		}
		if page.Rev != first {
			t.Errorf("page at rev %d, want the first page's %d", page.Rev, first)
		}
		for _, o := range page.Items {
			names = append(names, o.(*corev1.ConfigMap).Name)
		}
	}
	if !slices.Equal(names, []string{"o0", "o1", "o2", "o3", "o4"}) {
		t.Errorf("paged list %v", names)
	}
	if _, err := s.List(ctx, s.NamespacePrefix("ns"), storage.ListOptions{Continue: "garbage"}); !errors.Is(err, storage.ErrBadContinue) {
		t.Errorf("bad token: %v, want ErrBadContinue", err)
	}
	// A token of one namespace's list does not continue another's.
	tok, err := s.List(ctx, s.NamespacePrefix("ns"), storage.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, s.NamespacePrefix("other"), storage.ListOptions{Continue: tok.Continue}); !errors.Is(err, storage.ErrBadContinue) {
		t.Errorf("token of another list: %v, want ErrBadContinue", err)
	}
	// Filters apply per page.
	odd, err := s.List(ctx, s.Prefix(), storage.ListOptions{Filter: func(o runtime.Object) bool { return o.(*corev1.ConfigMap).Namespace == "other" }})
	if err != nil || len(odd.Items) != 1 {
		t.Errorf("filtered list: %+v %v", odd, err)
	}

	cur, err := storage.CurrentRevision(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, s.Prefix(), storage.ListOptions{Rev: cur + 1000}); !errors.Is(err, storage.ErrTooLarge) {
		t.Errorf("list at a future revision: %v, want ErrTooLarge", err)
	}
	if _, err := cl.Compact(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, s.Prefix(), storage.ListOptions{Rev: first}); !errors.Is(err, storage.ErrExpired) {
		t.Errorf("list at a compacted revision: %v, want ErrExpired", err)
	}
}

// startCache runs a watch cache over s until the test ends.
func startCache(t *testing.T, s *storage.Store, capacity int) *storage.Cache {
	t.Helper()
	c := storage.NewCache(s, capacity, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := c.WaitSynced(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return c
}

// collect reads events until n arrived.
func collect(t *testing.T, w *storage.Watcher, n int) []*storage.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*storage.Event
	for len(out) < n {
		batch, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(out), n, err)
		}
		out = append(out, batch...)
	}
	return out
}

func describe(evs []*storage.Event) []string {
	var out []string
	for _, e := range evs {
		s := string(e.Type)
		if e.Object != nil {
			s += " " + e.Object.(*corev1.ConfigMap).Name + "=" + value(e.Object)
		}
		out = append(out, s)
	}
	return out
}

func TestCacheListAndWatchFromAResourceVersion(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	// The cache holds the events since it started: start it first.
	c := startCache(t, s, 100)
	a, err := s.Create(ctx, s.Key("ns", "a"), cm("ns", "a", "1"), storage.Claims{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, s.Key("other", "z"), cm("other", "z", "1"), storage.Claims{}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRevision(ctx, rv(t, a)); err != nil {
		t.Fatal(err)
	}

	// fromRev 0 replays the current state as Added, then follows.
	w0, err := c.Watch(ctx, s.NamespacePrefix("ns"), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w0.Stop()
	if w0.InitialCount() != 1 || w0.InitialRev() < rv(t, a) {
		t.Errorf("initial state: %d objects at rev %d", w0.InitialCount(), w0.InitialRev())
	}
	if got := describe(collect(t, w0, 1)); !slices.Equal(got, []string{"ADDED a=1"}) {
		t.Errorf("replay %v", got)
	}
	// A watch from a's revision sees what follows, in order, only in its
	// namespace; Deleted carries the last state at the deletion's revision.
	w, err := c.Watch(ctx, s.NamespacePrefix("ns"), rv(t, a), false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	a2, err := s.Update(ctx, s.Key("ns", "a"), rv(t, a), cm("ns", "a", "2"), storage.Claims{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, s.Key("other", "y"), cm("other", "y", "1"), storage.Claims{}); err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, s.Key("ns", "b"), cm("ns", "b", "1"), storage.Claims{})
	if err != nil {
		t.Fatal(err)
	}
	delRev, err := s.Delete(ctx, s.Key("ns", "a"), rv(t, a2), storage.Claims{})
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, w, 3)
	if got := describe(evs); !slices.Equal(got, []string{"MODIFIED a=2", "ADDED b=1", "DELETED a=2"}) {
		t.Errorf("events %v", got)
	}
	if evs[0].PrevObject == nil || value(evs[0].PrevObject) != "1" || evs[1].Rev != rv(t, b) || evs[2].Rev != delRev || rv(t, evs[2].Object) != delRev {
		t.Errorf("event details: prev %v, revs %d %d (%s)", evs[0].PrevObject, evs[1].Rev, evs[2].Rev, evs[2].Object.(*corev1.ConfigMap).ResourceVersion)
	}
	if string(evs[1].Encoded()) == "" {
		t.Error("no encoding of an event")
	}
	// Replaying from the same revision gives the same events again.
	again, err := c.Watch(ctx, s.NamespacePrefix("ns"), rv(t, a), false)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop()
	if got := describe(collect(t, again, 3)); !slices.Equal(got, []string{"MODIFIED a=2", "ADDED b=1", "DELETED a=2"}) {
		t.Errorf("replayed events %v", got)
	}
	// A list at least as new as the delete does not show a.
	objs, listRev, err := c.List(ctx, s.NamespacePrefix("ns"), delRev, nil)
	if err != nil || len(objs) != 1 || objs[0].(*corev1.ConfigMap).Name != "b" || listRev < delRev {
		t.Errorf("list at rev >= %d: %d objects at %d, %v", delRev, len(objs), listRev, err)
	}
	if c.Get(s.Key("ns", "a")) != nil || c.Get(s.Key("ns", "b")) == nil {
		t.Error("cache Get disagrees with the writes")
	}
}

// TestCacheTooOldAndTooNew: the cache keeps the last capacity events; a
// watch from before them must relist (ErrExpired), and one from a revision
// etcd has not reached fails after a short wait (ErrTooLarge).
func TestCacheTooOldAndTooNew(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	c := startCache(t, s, 2)
	first, err := s.Create(ctx, s.Key("ns", "a"), cm("ns", "a", "0"), storage.Claims{})
	if err != nil {
		t.Fatal(err)
	}
	last := first
	for i := 1; i < 6; i++ {
		if last, err = s.Update(ctx, s.Key("ns", "a"), rv(t, last), cm("ns", "a", strconv.Itoa(i)), storage.Claims{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitRevision(ctx, rv(t, last)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Watch(ctx, s.Prefix(), rv(t, first), false); !errors.Is(err, storage.ErrExpired) {
		t.Errorf("watch from an event no longer held: %v, want ErrExpired", err)
	}
	// The newest events are still there.
	w, err := c.Watch(ctx, s.Prefix(), rv(t, last)-1, false)
	if err != nil {
		t.Fatalf("watch from the newest events: %v", err)
	}
	if got := describe(collect(t, w, 1)); !slices.Equal(got, []string{"MODIFIED a=5"}) {
		t.Errorf("events %v", got)
	}
	w.Stop()
	if _, err := c.Watch(ctx, s.Prefix(), rv(t, last)+1000, false); !errors.Is(err, storage.ErrTooLarge) {
		t.Errorf("watch from the future: %v, want ErrTooLarge", err)
	}
	if _, _, err := c.List(ctx, s.Prefix(), rv(t, last)+1000, nil); !errors.Is(err, storage.ErrTooLarge) {
		t.Errorf("list from the future: %v, want ErrTooLarge", err)
	}
}

// TestCacheBookmarks: a watcher that asked for bookmarks learns that etcd
// moved on without a change in its prefix; one that did not ask is not
// woken.
func TestCacheBookmarks(t *testing.T) {
	s, cl := newStore(t)
	ctx := ctxT(t)
	c := startCache(t, s, 100)
	with, err := c.Watch(ctx, s.Prefix(), 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer with.Stop()
	without, err := c.Watch(ctx, s.Prefix(), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer without.Stop()
	put, err := cl.Put(ctx, "/storagetest-elsewhere/"+t.Name(), "x") // outside the prefix
	if err != nil {
		t.Fatal(err)
	}
	var bm *storage.Event
	for bm == nil {
		c.RequestBookmarks(ctx)
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		batch, err := with.Next(wctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			t.Fatal("no bookmark")
		}
		for _, e := range batch {
			if e.Type == watch.Bookmark && e.Rev >= put.Header.Revision {
				bm = e
			}
		}
	}
	if c.Revision() < put.Header.Revision {
		t.Errorf("cache at rev %d after a bookmark for %d", c.Revision(), put.Header.Revision)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if batch, err := without.Next(wctx); err == nil {
		t.Errorf("a watcher without bookmarks got %v", describe(batch))
	}
}

// TestCacheConcurrentWriters: writers racing on one object through
// optimistic concurrency lose no update, and a watcher sees each one once,
// in revision order.
func TestCacheConcurrentWriters(t *testing.T) {
	s, _ := newStore(t)
	ctx := ctxT(t)
	c := startCache(t, s, 1000)
	key := s.Key("ns", "counter")
	created, err := s.Create(ctx, key, cm("ns", "counter", "0"), storage.Claims{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, s.Prefix(), rv(t, created), false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const writers, each = 4, 10
	var wg sync.WaitGroup
	var conflicts sync.Map
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			for range each {
				for {
					cur, err := s.Get(ctx, key)
					if err != nil {
						errs <- err
						return
					}
					n, _ := strconv.Atoi(value(cur))
					_, err = s.Update(ctx, key, rv(t, cur), cm("ns", "counter", strconv.Itoa(n+1)), storage.Claims{})
					if errors.Is(err, storage.ErrConflict) {
						conflicts.Store(i, true)
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	evs := collect(t, w, writers*each)
	for i, e := range evs {
		if e.Type != watch.Modified || value(e.Object) != strconv.Itoa(i+1) {
			t.Fatalf("event %d: %s, want MODIFIED counter=%d", i, describe([]*storage.Event{e}), i+1)
		}
		if i > 0 && e.Rev <= evs[i-1].Rev {
			t.Fatalf("event %d at rev %d after rev %d", i, e.Rev, evs[i-1].Rev)
		}
	}
	final, err := s.Get(ctx, key)
	if err != nil || value(final) != strconv.Itoa(writers*each) {
		t.Errorf("final counter %v, %v, want %d", final, err, writers*each)
	}
}
