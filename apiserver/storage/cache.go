package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Event is one change seen by the cache. Object and PrevObject are shared by
// every watcher and must not be mutated.
type Event struct {
	Type       watch.EventType
	Object     runtime.Object
	PrevObject runtime.Object // nil for Added
	Rev        int64

	once    sync.Once
	encoded []byte
}

// Encoded returns the JSON of Object, computed once for all watchers.
func (e *Event) Encoded() []byte {
	e.once.Do(func() {
		data, err := json.Marshal(e.Object)
		if err != nil {
			data = nil
		}
		e.encoded = data
	})
	return e.encoded
}

// Cache mirrors one resource prefix from a single etcd watch and serves
// watches and resourceVersion=0 lists from memory.
type Cache struct {
	store    *Store
	capacity int
	log      *slog.Logger

	mu       sync.RWMutex
	synced   chan struct{}
	items    map[string]runtime.Object
	ring     []*Event // oldest first
	coverRev int64    // every event after coverRev is in ring
	rev      int64    // the newest revision the cache has seen
	watchers map[*Watcher]struct{}
	revCond  *sync.Cond
}

// NewCache returns a cache for store keeping the last capacity events.
func NewCache(store *Store, capacity int, log *slog.Logger) *Cache {
	if capacity <= 0 {
		capacity = 10000
	}
	c := &Cache{
		store:    store,
		capacity: capacity,
		log:      log,
		synced:   make(chan struct{}),
		items:    map[string]runtime.Object{},
		watchers: map[*Watcher]struct{}{},
	}
	c.revCond = sync.NewCond(&c.mu)
	return c
}

// Run fills the cache and follows etcd until ctx ends. After a watch failure
// it relists and ends every client watch, as the clients must relist too.
func (c *Cache) Run(ctx context.Context) {
	for ctx.Err() == nil {
		rev, err := c.relist(ctx)
		if err != nil {
			c.log.Warn("watch cache list failed", "prefix", c.store.prefix, "err", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		err = c.follow(ctx, rev)
		if ctx.Err() != nil {
			break
		}
		c.log.Warn("watch cache lost its etcd watch; relisting", "prefix", c.store.prefix, "err", err)
	}
	c.mu.Lock()
	for w := range c.watchers {
		w.stop(ErrShuttingDown)
	}
	c.mu.Unlock()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (c *Cache) relist(ctx context.Context) (int64, error) {
	res, err := c.store.List(ctx, c.store.prefix, ListOptions{})
	if err != nil {
		return 0, err
	}
	items := make(map[string]runtime.Object, len(res.Items))
	for _, obj := range res.Items {
		acc, _ := meta.Accessor(obj)
		items[c.store.Key(acc.GetNamespace(), acc.GetName())] = obj
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for w := range c.watchers {
		w.stop(ErrExpired)
		delete(c.watchers, w)
	}
	c.items = items
	c.ring = nil
	c.coverRev = res.Rev
	c.rev = res.Rev
	select {
	case <-c.synced:
	default:
		close(c.synced)
	}
	c.revCond.Broadcast()
	return res.Rev, nil
}

func (c *Cache) follow(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := c.store.client.Watch(wctx, c.store.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.IsProgressNotify() {
			c.advance(resp.Header.Revision)
			continue
		}
		for _, ev := range resp.Events {
			if err := c.apply(ev); err != nil {
				c.log.Error("watch cache cannot decode object", "key", string(ev.Kv.Key), "err", err)
			}
		}
	}
	return fmt.Errorf("etcd watch channel closed")
}

// advance records that etcd has reached rev with no change in this prefix,
// and sends bookmarks to the watchers that asked for them.
func (c *Cache) advance(rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev > c.rev {
		c.rev = rev
		c.revCond.Broadcast()
	}
	for w := range c.watchers {
		w.bookmark(c.rev)
	}
}

func (c *Cache) apply(ev *clientv3.Event) error {
	key := string(ev.Kv.Key)
	e := &Event{Rev: ev.Kv.ModRevision}
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.items[key]
	switch ev.Type {
	case clientv3.EventTypeDelete:
		if prev == nil {
			c.rev = ev.Kv.ModRevision
			return nil
		}
		obj := prev.DeepCopyObject()
		acc, _ := meta.Accessor(obj)
		acc.SetResourceVersion(fmt.Sprint(ev.Kv.ModRevision))
		e.Type, e.Object, e.PrevObject = watch.Deleted, obj, prev
		delete(c.items, key)
	default:
		obj, err := c.store.Decode(ev.Kv.Value, ev.Kv.ModRevision)
		if err != nil {
			c.rev = ev.Kv.ModRevision
			return err
		}
		e.Object, e.PrevObject = obj, prev
		e.Type = watch.Modified
		if prev == nil {
			e.Type = watch.Added
		}
		c.items[key] = obj
	}
	c.rev = e.Rev
	c.ring = append(c.ring, e)
	// Trim lazily, in place, once the ring holds twice its capacity: the
	// cost per event stays constant instead of copying the ring each time.
	if len(c.ring) >= 2*c.capacity {
		drop := len(c.ring) - c.capacity
		c.coverRev = c.ring[drop-1].Rev
		n := copy(c.ring, c.ring[drop:])
		clear(c.ring[n:])
		c.ring = c.ring[:n]
	}
	for w := range c.watchers {
		w.push(e)
	}
	c.revCond.Broadcast()
	return nil
}

// WaitSynced blocks until the first list has filled the cache.
func (c *Cache) WaitSynced(ctx context.Context) error {
	select {
	case <-c.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Revision is the newest revision the cache has seen.
func (c *Cache) Revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// progressRetry is how often waitFor asks etcd again for a progress
// notification: etcd drops a request that arrives while any watcher on
// the stream is still catching up (its progress is only sent when every
// watcher is synced), so one request can go unanswered under load.
const progressRetry = 100 * time.Millisecond

// waitFor blocks (lock held) until the cache has seen rev, asking etcd for
// progress notifications so that quiet prefixes catch up too.
func (c *Cache) waitFor(ctx context.Context, rev int64) error {
	if c.rev >= rev {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	go func() {
		tick := time.NewTicker(progressRetry)
		defer tick.Stop()
		for ctx.Err() == nil {
			_ = c.store.client.RequestProgress(ctx)
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
		c.mu.Lock()
		c.revCond.Broadcast()
		c.mu.Unlock()
	}()
	for c.rev < rev {
		if ctx.Err() != nil {
			return ErrTooLarge
		}
		c.revCond.Wait()
	}
	return nil
}

// List returns the cached objects under prefix that pass filter, sorted by
// key, at a revision not older than minRev.
func (c *Cache) List(ctx context.Context, prefix string, minRev int64, filter func(runtime.Object) bool) ([]runtime.Object, int64, error) {
	if err := c.WaitSynced(ctx); err != nil {
		return nil, 0, err
	}
	// Most lists need no waiting: serve them under the read lock so that
	// concurrent lists do not queue behind each other.
	c.mu.RLock()
	if c.rev >= minRev {
		objs, rev := c.snapshot(prefix, filter)
		c.mu.RUnlock()
		return objs, rev, nil
	}
	c.mu.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitFor(ctx, minRev); err != nil {
		return nil, 0, err
	}
	objs, rev := c.snapshot(prefix, filter)
	return objs, rev, nil
}

// snapshot lists the objects under prefix in key order; the caller holds mu.
func (c *Cache) snapshot(prefix string, filter func(runtime.Object) bool) ([]runtime.Object, int64) {
	keys := make([]string, 0, len(c.items))
	for k := range c.items {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	objs := make([]runtime.Object, 0, len(keys))
	for _, k := range keys {
		if obj := c.items[k]; filter == nil || filter(obj) {
			objs = append(objs, obj)
		}
	}
	return objs, c.rev
}

// Watch starts a watcher on prefix. fromRev 0 first replays the current state
// as Added events; otherwise every event after fromRev is delivered, or
// ErrExpired is returned when those events are no longer held.
func (c *Cache) Watch(ctx context.Context, prefix string, fromRev int64, bookmarks bool) (*Watcher, error) {
	if err := c.WaitSynced(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := newWatcher(c, prefix, bookmarks)
	if fromRev == 0 {
		keys := make([]string, 0, len(c.items))
		for k := range c.items {
			if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			w.queue = append(w.queue, &Event{Type: watch.Added, Object: c.items[k], Rev: c.rev})
		}
		w.initialCount, w.initialRev, w.lastRev = len(w.queue), c.rev, c.rev
	} else {
		if fromRev < c.coverRev {
			return nil, ErrExpired
		}
		if err := c.waitFor(ctx, fromRev); err != nil {
			return nil, err
		}
		w.lastRev = fromRev
		i := sort.Search(len(c.ring), func(i int) bool { return c.ring[i].Rev > fromRev })
		for _, e := range c.ring[i:] {
			w.push(e)
		}
	}
	c.watchers[w] = struct{}{}
	return w, nil
}

// RequestBookmarks asks etcd for a progress notification, which the cache
// turns into bookmarks for the watchers that want them.
func (c *Cache) RequestBookmarks(ctx context.Context) {
	c.mu.RLock()
	want := false
	for w := range c.watchers {
		if w.bookmarks {
			want = true
			break
		}
	}
	c.mu.RUnlock()
	if want {
		_ = c.store.client.RequestProgress(ctx)
	}
}

func (c *Cache) remove(w *Watcher) {
	c.mu.Lock()
	delete(c.watchers, w)
	c.mu.Unlock()
}

// maxQueue bounds how far one watcher may fall behind before it is ended;
// the client then rewatches from its last resourceVersion.
const maxQueue = 200000

// Watcher receives a cache's events for one prefix. Its queue is unbounded up
// to maxQueue so that a burst of writes never blocks the cache.
type Watcher struct {
	initialCount int
	initialRev   int64
	prefix       string
	bookmarks    bool
	cache        *Cache

	mu      sync.Mutex
	lastRev int64 // newest revision queued, so bookmarks never go backwards
	queue   []*Event
	signal  chan struct{}
	err     error
	done    bool
}

func newWatcher(c *Cache, prefix string, bookmarks bool) *Watcher {
	return &Watcher{cache: c, prefix: prefix, bookmarks: bookmarks, signal: make(chan struct{}, 1)}
}

func (w *Watcher) push(e *Event) {
	if e.Type != watch.Bookmark {
		key := keyOf(e.Object, w.cache)
		if key != "" && (len(key) < len(w.prefix) || key[:len(w.prefix)] != w.prefix) {
			return
		}
	}
	w.mu.Lock()
	if e.Rev > w.lastRev {
		w.lastRev = e.Rev
	}
	if !w.done {
		if len(w.queue) >= maxQueue {
			w.err, w.done = fmt.Errorf("watcher fell behind by %d events", maxQueue), true
		} else {
			w.queue = append(w.queue, e)
		}
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func keyOf(obj runtime.Object, c *Cache) string {
	if c == nil {
		return ""
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return c.store.Key(acc.GetNamespace(), acc.GetName())
}

func (w *Watcher) bookmark(rev int64) {
	w.mu.Lock()
	stale := rev <= w.lastRev
	w.mu.Unlock()
	if !w.bookmarks || stale {
		return
	}
	w.push(&Event{Type: watch.Bookmark, Rev: rev})
}

func (w *Watcher) stop(err error) {
	w.mu.Lock()
	if !w.done {
		w.err, w.done = err, true
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// Next waits for the next batch of events. It returns a non-nil error when
// the watch has ended (ctx done, or the cache ended it).
func (w *Watcher) Next(ctx context.Context) ([]*Event, error) {
	for {
		w.mu.Lock()
		if len(w.queue) > 0 {
			batch := w.queue
			w.queue = nil
			w.mu.Unlock()
			return batch, nil
		}
		if w.done {
			err := w.err
			w.mu.Unlock()
			return nil, err
		}
		w.mu.Unlock()
		select {
		case <-w.signal:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Stop unregisters the watcher.
func (w *Watcher) Stop() {
	if w.cache != nil {
		w.cache.remove(w)
	}
	w.stop(fmt.Errorf("stopped"))
}

// Get returns the cached object at key, or nil. The object is shared: copy
// it before changing it.
func (c *Cache) Get(key string) runtime.Object {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.items[key]
}

// InitialCount is how many replayed Added events open a fromRev=0 watch.
func (w *Watcher) InitialCount() int { return w.initialCount }

// InitialRev is the revision of the replayed state.
func (w *Watcher) InitialRev() int64 { return w.initialRev }

// WaitRevision blocks until the cache has seen rev (0: returns at once).
func (c *Cache) WaitRevision(ctx context.Context, rev int64) error {
	if err := c.WaitSynced(ctx); err != nil {
		return err
	}
	// A cache that is caught up (nearly always) answers under the read
	// lock, so callers on every request do not serialise.
	c.mu.RLock()
	done := c.rev >= rev
	c.mu.RUnlock()
	if done {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitFor(ctx, rev)
}
