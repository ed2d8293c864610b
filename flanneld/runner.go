package flanneld

import (
	"context"
	"time"
)

// runner runs fn when nudged, at most once per minInterval, and at least
// once per maxInterval; a failed run is retried after a backoff that
// doubles up to maxInterval. Nudges that arrive during a run coalesce into
// one more run.
type runner struct {
	nudge       chan struct{}
	minInterval time.Duration
	maxInterval time.Duration
}

func newRunner(minInterval, maxInterval time.Duration) *runner {
	return &runner{nudge: make(chan struct{}, 1), minInterval: minInterval, maxInterval: maxInterval}
}

// Nudge asks for a run soon; it never blocks.
func (r *runner) Nudge() {
	select {
	case r.nudge <- struct{}{}:
	default:
	}
}

func (r *runner) Loop(ctx context.Context, fn func(context.Context) error) {
	backoff := time.Duration(0)
	last := time.Time{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.nudge:
		case <-timer.C:
		}
		if wait := r.minInterval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		next := r.maxInterval
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), r.maxInterval)
			next = backoff
		} else {
			backoff = 0
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}
