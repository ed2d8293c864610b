package workers

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

func TestRunSyncsRetriesAndStopsWithContext(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, time.Millisecond))
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	calls := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, q, 3, "key", slog.New(slog.DiscardHandler), func(_ context.Context, key string) error {
			mu.Lock()
			defer mu.Unlock()
			calls[key]++
			if key == "flaky" && calls[key] == 1 {
				return errors.New("first try fails")
			}
			if calls["ok"] == 1 && calls["flaky"] == 2 {
				cancel()
			}
			return nil
		})
	}()
	q.Add("flaky")
	q.Add("ok")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	if !q.ShuttingDown() {
		t.Error("Run returned without shutting the queue down")
	}
	if calls["ok"] != 1 || calls["flaky"] != 2 {
		t.Errorf("sync calls %v, want ok once and flaky twice (one retry)", calls)
	}
}
