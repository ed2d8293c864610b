package periodic_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nodenet/nodenet/internal/periodic"
)

func TestEveryCallsOncePerIntervalUntilCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var calls []time.Duration
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			periodic.Every(ctx, time.Second, func(context.Context) {
				calls = append(calls, time.Since(start))
			})
		}()
		time.Sleep(3500 * time.Millisecond)
		cancel()
		<-done
		want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
		if len(calls) != len(want) {
			t.Fatalf("calls at %v, want %v", calls, want)
		}
		for i := range want {
			if calls[i] != want[i] {
				t.Fatalf("calls at %v, want %v", calls, want)
			}
		}
	})
}

func TestEveryReturnsAtOnceWhenCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		periodic.Every(ctx, time.Millisecond, func(context.Context) {
			t.Error("fn called after cancellation")
		})
	})
}
