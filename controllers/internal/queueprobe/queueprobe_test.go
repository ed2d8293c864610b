package queueprobe

import (
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

func newQueue() *Queue {
	return Wrap(workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()))
}

// syncOne takes the next key and finishes it, as a worker would, calling
// during (if not nil) while the sync runs.
func syncOne(t *testing.T, q *Queue, during func()) string {
	t.Helper()
	key, quit := q.Get()
	if quit {
		t.Fatal("queue shut down")
	}
	if during != nil {
		during()
	}
	q.Done(key)
	return key
}

func handled(q *Queue, key string, mark int) bool {
	ok, _ := q.Handled(key, mark)
	return ok
}

func TestHandledFollowsAddsAndSyncs(t *testing.T) {
	q := newQueue()
	defer q.ShutDown()
	if handled(q, "a", 0) {
		t.Fatal("a key never added is handled")
	}
	mark := q.Mark()
	q.Add("a")
	if handled(q, "a", mark) {
		t.Fatal("handled before any sync")
	}
	// An add while the sync runs: that sync may have read the old state.
	syncOne(t, q, func() {
		if handled(q, "a", mark) {
			t.Error("handled while its sync runs")
		}
		q.Add("a")
	})
	if handled(q, "a", mark) {
		t.Fatal("handled although added during its sync")
	}
	syncOne(t, q, nil)
	if !handled(q, "a", mark) {
		t.Fatal("not handled after a sync that started after the last add")
	}
	// Nothing added since a newer mark: not handled since then.
	if handled(q, "a", q.Mark()) {
		t.Error("handled since a mark after which it was never added")
	}
}

func TestDelayedAddIsPendingUntilSynced(t *testing.T) {
	q := newQueue()
	defer q.ShutDown()
	q.Add("a")
	syncOne(t, q, func() { q.AddAfter("a", 10*time.Millisecond) }) // a retry
	if handled(q, "a", 0) {
		t.Fatal("handled with a retry pending")
	}
	syncOne(t, q, nil) // blocks until the retry is due
	if !handled(q, "a", 0) {
		t.Fatal("not handled after the retry was synced")
	}
}

func TestWaitConsultsSettled(t *testing.T) {
	q := newQueue()
	defer q.ShutDown()
	q.Add("a")
	syncOne(t, q, nil)
	calls := 0
	q.Wait(t, "a", 0, func() (bool, string) {
		calls++
		return calls == 3, "writes in flight"
	})
	if calls != 3 {
		t.Errorf("settled called %d times, want until it said yes", calls)
	}
}
