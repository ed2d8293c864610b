package nettest

import (
	"bytes"
	"sync"
)

// Buffer collects a background process's output: exec's copying
// goroutines write to it while the test reads it, which a bare
// bytes.Buffer does not allow. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
