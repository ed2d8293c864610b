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
	var wg sync.WaitGroup
	for range max(n, 1) {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for next(ctx, queue, what, log, syncKey) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
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
