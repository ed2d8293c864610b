package nettest

import "testing"

// SkipShort skips a slow test under `go test -short` (make test-short),
// saying what makes it slow; `make test` runs it. Unlike the privilege
// gates it never fails: -short is a choice, not a broken environment.
func SkipShort(t testing.TB, slowBecause string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s; make test runs it", slowBecause)
	}
}
