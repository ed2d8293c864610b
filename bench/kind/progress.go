package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nodenet/nodenet/internal/periodic"
)

// progress prints one line when a step starts, one every interval while it
// runs and one with its duration when it ends: a cold build is long, and
// silence would look like a hang.
type progress struct {
	w        io.Writer
	interval time.Duration
	now      func() time.Time
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, interval: 30 * time.Second, now: time.Now}
}

// step runs fn as the named step.
func (p *progress) step(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	start := p.now()
	fmt.Fprintf(p.w, "==> %s\n", name)
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		periodic.Every(tctx, p.interval, func(context.Context) {
			fmt.Fprintf(p.w, "    … %s (%s)\n", name, p.now().Sub(start).Round(time.Second))
		})
	}()
	err := fn(ctx)
	cancel()
	<-done
	d := p.now().Sub(start).Round(100 * time.Millisecond)
	if err != nil {
		fmt.Fprintf(p.w, "<== %s: FAILED after %s\n", name, d)
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(p.w, "<== %s (%s)\n", name, d)
	return nil
}

// note is a line inside a step.
func (p *progress) note(format string, args ...any) {
	fmt.Fprintf(p.w, "    "+format+"\n", args...)
}
