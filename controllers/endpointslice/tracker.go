package endpointslice

import (
	"errors"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// errStaleCache means the slice informer has not yet seen a write of ours;
// a sync that ran on that view would create duplicates or undo its own work.
var errStaleCache = errors.New("endpointslice cache older than our last writes")

// sliceTracker remembers, per Service, our writes (creates, updates,
// deletes of slices) that the slice informer has not shown yet. It answers
// two questions:
//
//   - stale: may the informer's view of a Service's slices be older than our
//     own writes? Then a sync would create duplicates or conflict.
//   - own: is an informer event merely the echo of our own write? Those need
//     no sync; anything else (a user edit, a deletion) is drift to repair.
//
// A write is settled once its echo arrives (the informer updates its store
// before it calls handlers), so the tracker only holds writes in flight.
// It deliberately does not use metadata.generation: this API server does not
// maintain it for EndpointSlices, and resourceVersions identify a write
// exactly.
type sliceTracker struct {
	mu      sync.Mutex
	pending map[string]map[string]pendingWrite // service key → slice name →
	// waiting holds the Services whose last sync found the view stale; the
	// next event of one of their slices queues them again.
	waiting map[string]bool
	// cached returns the informer's copy of a slice, if any.
	cached func(namespace, name string) *discoveryv1.EndpointSlice
	now    func() time.Time
}

type pendingWrite struct {
	resourceVersion string // of our create/update; "" for a delete
	deleted         bool
	at              time.Time
}

// staleGiveUp bounds how long a write may stay unseen. A slice created and
// deleted again while the watch was relisting never produces an event;
// without a bound its record would wedge its Service forever. Proceeding
// on a stale view costs at most a duplicate slice or a conflict, which the
// following syncs repair.
const staleGiveUp = 30 * time.Second

func newSliceTracker(cached func(namespace, name string) *discoveryv1.EndpointSlice) *sliceTracker {
	return &sliceTracker{
		pending: map[string]map[string]pendingWrite{},
		waiting: map[string]bool{},
		cached:  cached,
		now:     time.Now,
	}
}

func (t *sliceTracker) set(key, name string, w pendingWrite) {
	m := t.pending[key]
	if m == nil {
		m = map[string]pendingWrite{}
		t.pending[key] = m
	}
	w.at = t.now()
	m[name] = w
}

func (t *sliceTracker) clear(key, name string) {
	if m := t.pending[key]; m != nil {
		delete(m, name)
		if len(m) == 0 {
			delete(t.pending, key)
		}
	}
}

// wrote records a slice as returned by a create or update, unless the
// informer already holds it (its echo was faster than our response).
func (t *sliceTracker) wrote(key string, s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.cached(s.Namespace, s.Name); c != nil && rvAtLeast(c.ResourceVersion, s.ResourceVersion) {
		t.clear(key, s.Name)
		return
	}
	t.set(key, s.Name, pendingWrite{resourceVersion: s.ResourceVersion})
}

// removed records a slice we deleted, unless the informer already lost it.
func (t *sliceTracker) removed(key string, s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cached(s.Namespace, s.Name) == nil {
		t.clear(key, s.Name)
		return
	}
	t.set(key, s.Name, pendingWrite{deleted: true})
}

// view returns our cached slices of key, and whether that view may be older
// than our own writes. list runs under the tracker's lock: a handler that
// settles a write (after the informer stored it) waits for the lock, so a
// view listed before the store update still finds the write pending.
func (t *sliceTracker) view(key string, list func() []*discoveryv1.EndpointSlice) ([]*discoveryv1.EndpointSlice, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cached := list()
	cutoff := t.now().Add(-staleGiveUp)
	stale := false
	for name, w := range t.pending[key] {
		if w.at.Before(cutoff) {
			t.clear(key, name)
			continue
		}
		stale = true
	}
	if stale {
		t.waiting[key] = true
	} else {
		delete(t.waiting, key)
	}
	return cached, stale
}

// wake reports (and clears) whether key waits for an event. Callers hold
// t.mu.
func (t *sliceTracker) wake(key string) bool {
	if !t.waiting[key] {
		return false
	}
	delete(t.waiting, key)
	return true
}

// observed handles an add or update event of one of our slices. own: it is
// the echo of our own write; wake: its Service waits for an event.
func (t *sliceTracker) observed(key string, s *discoveryv1.EndpointSlice) (own, wake bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	wake = t.wake(key)
	w, ok := t.pending[key][s.Name]
	if ok && !w.deleted && rvAtLeast(s.ResourceVersion, w.resourceVersion) {
		own = s.ResourceVersion == w.resourceVersion
		t.clear(key, s.Name)
	}
	return own, wake
}

// observedDelete handles the delete event of one of our slices: own means
// we deleted it. A pending write of a slice someone else deleted is
// settled too: it is never coming back.
func (t *sliceTracker) observedDelete(key, name string) (own, wake bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	wake = t.wake(key)
	if w, ok := t.pending[key][name]; ok {
		own = w.deleted
		t.clear(key, name)
	}
	return own, wake
}

// rvAtLeast reports whether resourceVersion a is b or newer. Equality is
// all the API promises; resourceVersions that parse as integers (etcd
// revisions, here and in kube-apiserver) are also ordered, which settles a
// write whose exact echo a relist skipped. Otherwise staleGiveUp does.
func rvAtLeast(a, b string) bool {
	if a == b {
		return true
	}
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}

// triggerTimes keeps, per Service, the time of the oldest change not yet
// synced. It becomes the endpoints.kubernetes.io/last-change-trigger-time
// annotation, from which proxies measure how long a change took to reach
// the data plane. The time is when our watch saw the change: the objects'
// own timestamps are second-granular on the wire, too coarse for that.
type triggerTimes struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func newTriggerTimes() *triggerTimes { return &triggerTimes{m: map[string]time.Time{}} }

// note records a change of key at t, keeping the oldest pending change.
func (tt *triggerTimes) note(key string, t time.Time) {
	if t.IsZero() {
		return
	}
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if cur, ok := tt.m[key]; !ok || t.Before(cur) {
		tt.m[key] = t
	}
}

// take returns and clears the pending trigger time of key.
func (tt *triggerTimes) take(key string) time.Time {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	t := tt.m[key]
	delete(tt.m, key)
	return t
}
