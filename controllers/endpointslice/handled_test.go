package endpointslice

import (
	"fmt"
	"testing"
)

// handled waits until the controller has handled key since mark (see
// queueprobe) and the slice informer has shown every write of ours for
// it, so no echo of them is still to come.
func (r *running) handled(t *testing.T, key string, mark int) {
	t.Helper()
	r.q.Wait(t, key, mark, func() (bool, string) {
		r.c.tracker.mu.Lock()
		defer r.c.tracker.mu.Unlock()
		n := len(r.c.tracker.pending[key])
		return n == 0, fmt.Sprintf("%d writes not yet seen by the informer", n)
	})
}

// idle waits until the controller has handled key at least once and has
// nothing left to do for it.
func (r *running) idle(t *testing.T, key string) { t.Helper(); r.handled(t, key, 0) }
