package ipvs

import (
	"log/slog"
	"time"
)

// phases times the steps of one sync, logged at debug level: where a slow
// sync spends its time (the kernel's part shows as the step that waits
// on it).
type phases struct {
	start, last time.Time
	attrs       []any
}

func newPhases() *phases {
	now := time.Now()
	return &phases{start: now, last: now}
}

// mark ends the step named name.
func (ph *phases) mark(name string) {
	now := time.Now()
	ph.attrs = append(ph.attrs, name, now.Sub(ph.last).Round(time.Microsecond))
	ph.last = now
}

func (ph *phases) log(l *slog.Logger, full bool) {
	if l == nil {
		return
	}
	l.Debug("ipvs sync phases", append([]any{"full", full, "total", time.Since(ph.start).Round(time.Microsecond)}, ph.attrs...)...)
}
