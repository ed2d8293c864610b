package queueprobe

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// Queue is a work queue that records when keys are added and synced.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	clock   int
	added   map[string]int // key → clock of its last add
	started map[string]int // key → clock when its running sync started
	synced  map[string]int // key → start clock of its last finished sync
}

// Wrap returns q with the recording; install it in the controller before
// its informers start, so every handler call goes through it.
func Wrap(q workqueue.TypedRateLimitingInterface[string]) *Queue {
	return &Queue{TypedRateLimitingInterface: q, added: map[string]int{}, started: map[string]int{}, synced: map[string]int{}}
}

func (q *Queue) noteAdd(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.clock++
	q.added[key] = q.clock
}

// Add records and queues key.
func (q *Queue) Add(key string) {
	q.noteAdd(key)
	q.TypedRateLimitingInterface.Add(key)
}

// AddAfter records key now: it is not handled until the delayed add has
// been synced.
func (q *Queue) AddAfter(key string, d time.Duration) {
	q.noteAdd(key)
	q.TypedRateLimitingInterface.AddAfter(key, d)
}

// AddRateLimited records key as AddAfter does.
func (q *Queue) AddRateLimited(key string) {
	q.noteAdd(key)
	q.TypedRateLimitingInterface.AddRateLimited(key)
}

// Get records the start of a sync.
func (q *Queue) Get() (string, bool) {
	key, quit := q.TypedRateLimitingInterface.Get()
	if !quit {
		q.mu.Lock()
		q.clock++
		q.started[key] = q.clock
		q.mu.Unlock()
	}
	return key, quit
}

// Done records the end of a sync.
func (q *Queue) Done(key string) {
	q.mu.Lock()
	q.synced[key] = q.started[key]
	delete(q.started, key)
	q.mu.Unlock()
	q.TypedRateLimitingInterface.Done(key)
}

// Mark is the clock now: adds after it are the reaction to what the test
// does next.
func (q *Queue) Mark() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.clock
}

// Handled reports whether key was added after since and everything added
// for it has been synced, with a description for a timeout message.
func (q *Queue) Handled(key string, since int) (bool, string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	added, synced := q.added[key], q.synced[key]
	running, busy := q.started[key]
	desc := fmt.Sprintf("%s: last add at %d (want after %d), sync running since %d (%v), last finished sync started at %d",
		key, added, since, running, busy, synced)
	return added > since && !busy && synced > added, desc
}

// Wait waits until key is handled since mark (0: handled at least once and
// idle) and settled, which a controller's test may use for state of its
// own (writes not yet echoed by an informer); nil settled means nothing
// more.
func (q *Queue) Wait(t testing.TB, key string, mark int, settled func() (bool, string)) {
	t.Helper()
	const timeout = 30 * time.Second
	deadline := time.Now().Add(timeout)
	for {
		done, desc := q.Handled(key, mark)
		if done && settled != nil {
			var more string
			done, more = settled()
			desc += "; " + more
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("controller did not finish with %s within %v", desc, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
