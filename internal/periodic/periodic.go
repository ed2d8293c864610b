package periodic

import (
	"context"
	"time"
)

// Every calls fn once per interval, the first time one interval from now,
// and returns when ctx is done. A call that outlasts the interval delays
// the next one instead of piling calls up, as time.Ticker drops ticks.
func Every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The ticker and ctx may be ready together; select picks at random,
		// so check again rather than run fn after cancellation.
		if ctx.Err() != nil {
			return
		}
		fn(ctx)
	}
}
