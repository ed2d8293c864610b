package nettest

import "testing"

func TestSkipShortFollowsTheShortFlag(t *testing.T) {
	var reached bool
	t.Run("gated", func(t *testing.T) {
		SkipShort(t, "a test of the gate")
		reached = true
	})
	if reached == testing.Short() {
		t.Errorf("with -short=%v the gated test ran: %v", testing.Short(), reached)
	}
}
