package endpointslice

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// probedQueue wraps the controller's queue so a test can wait until the
// controller has handled an event, instead of sleeping and hoping: every
// add (immediate, delayed or rate-limited) and every sync start and end is
// numbered on one clock.
//
// A sync that starts after an add reads informer caches that already hold
// the change behind it (handlers run after the store is updated, and they
// add), so "the last completed sync of a key started after its last add"
// means the controller has acted on everything queued for it.
type probedQueue struct {
	workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	clock   int
	added   map[string]int // key → clock of its last add
	started map[string]int // key → clock when its running sync started
	synced  map[string]int // key → start clock of its last finished sync
}

func probe(q workqueue.TypedRateLimitingInterface[string]) *probedQueue {
	return &probedQueue{TypedRateLimitingInterface: q, added: map[string]int{}, started: map[string]int{}, synced: map[string]int{}}
}

func (q *probedQueue) noteAdd(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.clock++
	q.added[key] = q.clock
}

func (q *probedQueue) Add(key string) {
	q.noteAdd(key)
	q.TypedRateLimitingInterface.Add(key)
}

func (q *probedQueue) AddAfter(key string, d time.Duration) {
	q.noteAdd(key)
	q.TypedRateLimitingInterface.AddAfter(key, d)
}

func (q *probedQueue) AddRateLimited(key string) {
	q.noteAdd(key)
	q.TypedRateLimitingInterface.AddRateLimited(key)
}

func (q *probedQueue) Get() (string, bool) {
	key, quit := q.TypedRateLimitingInterface.Get()
	if !quit {
		q.mu.Lock()
		q.clock++
		q.started[key] = q.clock
		q.mu.Unlock()
	}
	return key, quit
}

func (q *probedQueue) Done(key string) {
	q.mu.Lock()
	q.synced[key] = q.started[key]
	delete(q.started, key)
	q.mu.Unlock()
	q.TypedRateLimitingInterface.Done(key)
}

// mark is the clock now: adds after it are the reaction to what the test
// does next.
func (q *probedQueue) mark() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.clock
}

// state reports whether key was added after since and everything added for
// it has been synced, with a description for a timeout message.
func (q *probedQueue) state(key string, since int) (bool, string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	added, running, synced := q.added[key], q.started[key], q.synced[key]
	_, busy := q.started[key]
	desc := fmt.Sprintf("last add at %d (want after %d), sync running since %d (%v), last finished sync started at %d", added, since, running, busy, synced)
	return added > since && !busy && synced > added, desc
}

// handled waits until the controller has handled key since mark: the key
// was queued after mark, no sync of it is queued or running, and the slice
// informer has shown every write of ours (so no echo is still to come).
func (r *running) handled(t *testing.T, key string, mark int) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		done, desc := r.q.state(key, mark)
		r.c.tracker.mu.Lock()
		inFlight := len(r.c.tracker.pending[key])
		r.c.tracker.mu.Unlock()
		if done && inFlight == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("controller did not finish with %s within %v: %s, %d writes not yet seen by the informer", key, waitLong, desc, inFlight)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// idle waits until the controller has handled key at least once and has
// nothing left to do for it.
func (r *running) idle(t *testing.T, key string) { t.Helper(); r.handled(t, key, 0) }
