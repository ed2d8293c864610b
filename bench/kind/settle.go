package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// settleWait is how a plane's measurement waits for the machine to go
// quiet first. Every plane is measured right after work of its own: a
// cluster coming up, a mode switch's rollout, a node image loaded. On 2
// CPUs that work's tail (load averages of 6–10 at the start of a plane
// in session 16's report) is still running during the first runs, and a
// plane measured after a bring-up lost to one measured after a quiet
// mode switch for no reason of its own. Waiting until the 1-minute load
// average falls to a bound (or a maximum time has passed) gives each
// plane the same start.
type settleWait struct {
	max    time.Duration // 0: do not wait
	target float64       // 1-minute load average to wait for
	poll   time.Duration
	load   func() (float64, error)
}

// settled is what one wait found.
type settled struct {
	waited      time.Duration
	from, to    float64
	reached     bool
	interrupted bool
}

// wait polls the load average until it is at most target, max has
// passed or ctx ends (the measurement that follows will then stop too).
func (s settleWait) wait(ctx context.Context) (settled, error) {
	start := time.Now()
	l, err := s.load()
	if err != nil {
		return settled{}, fmt.Errorf("read the load average: %w", err)
	}
	r := settled{from: l, to: l}
	for {
		if r.to <= s.target {
			r.reached = true
			break
		}
		if time.Since(start) >= s.max {
			break
		}
		select {
		case <-ctx.Done():
			r.interrupted = true
			r.waited = time.Since(start)
			return r, nil
		case <-time.After(s.poll):
		}
		if r.to, err = s.load(); err != nil {
			return r, fmt.Errorf("read the load average: %w", err)
		}
	}
	r.waited = time.Since(start)
	return r, nil
}

// note says what the wait did, for the report's notes ("" when there
// was nothing to wait for).
func (r settled) note(plane string, target float64, max time.Duration) string {
	switch {
	case r.interrupted:
		return ""
	case r.reached && r.from <= target:
		return ""
	case r.reached:
		return fmt.Sprintf("before %s: waited %s for the load average (1 min) to fall from %.2f to %.2f (bound %.2f)",
			plane, r.waited.Round(time.Second), r.from, r.to, target)
	default:
		return fmt.Sprintf("before %s: the load average (1 min) did not fall to %.2f within %s (%.2f → %.2f); measured anyway",
			plane, target, max, r.from, r.to)
	}
}

// procLoadAverage is /proc/loadavg's 1-minute figure.
func procLoadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/loadavg is empty")
	}
	return strconv.ParseFloat(f[0], 64)
}
