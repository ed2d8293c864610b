package workers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
)

// Run starts n workers (at least one) calling sync for each key until ctx
// ends, then shuts the queue down and waits for them. what names the key in
// the retry log line ("service", "pod", "node").
func Run(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], n int, what string, log *slog.Logger, syncKey func(context.Context, string) error) {
	Loop(ctx, queue, n, func(ctx context.Context) bool {
		return next(ctx, queue, what, log, syncKey)
	})
}

// Loop starts n workers (at least one), each calling processNext until it
// reports the queue shut down, until ctx ends; then it shuts the queue down
// and waits for them. It is Run for controllers whose retry policy is their
// own: processNext takes one key from queue and handles it.
func Loop(ctx context.Context, queue interface{ ShutDown() }, n int, processNext func(context.Context) bool) {
	var wg sync.WaitGroup
	for range max(n, 1) {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for processNext(ctx) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	// Shut the queue down before waiting, so idle workers blocked in Get
	// return.
	queue.ShutDown()
	wg.Wait()
}

func next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], what string, log *slog.Logger, syncKey func(context.Context, string) error) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	if err := syncKey(ctx, key); err != nil {
		log.Info("sync failed; retrying", what, key, "err", err)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}
