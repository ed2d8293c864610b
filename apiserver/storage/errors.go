package storage

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound: the key does not exist (at the requested revision).
	ErrNotFound = errors.New("not found")
	// ErrExists: a create found the key already present.
	ErrExists = errors.New("already exists")
	// ErrConflict: the object changed since the caller read it.
	ErrConflict = errors.New("the object has been modified")
	// ErrExpired: the requested revision has been compacted away.
	ErrExpired = errors.New("too old resource version")
	// ErrShuttingDown ends watches when the server stops; clients simply
	// reconnect, as the stream just closes.
	ErrShuttingDown = errors.New("server shutting down")
	// ErrTooLarge: the requested revision is newer than the store has seen.
	ErrTooLarge = errors.New("too large resource version")
	// ErrGuardChanged: a key in Claims.Unchanged was modified or removed.
	ErrGuardChanged = errors.New("a key the write depends on has changed")
)

// ClaimedError reports extra keys (allocations) that another object already
// holds; the caller chooses other values or reports the clash to the user.
type ClaimedError struct {
	Keys []string
}

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("already claimed: %v", e.Keys)
}

// IsClaimed reports whether err is (or wraps) a *ClaimedError and returns it.
func IsClaimed(err error) (*ClaimedError, bool) {
	var c *ClaimedError
	ok := errors.As(err, &c)
	return c, ok
}
