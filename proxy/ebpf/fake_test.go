package ebpf

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// fakeTable is a BPF hash map in memory: bounded like the kernel's, and
// failing with E2BIG when a new key does not fit, as the kernel does.
type fakeTable[K comparable, V any] struct {
	max     int
	entries map[K]V
}

func newFakeTable[K comparable, V any](max int) *fakeTable[K, V] {
	return &fakeTable[K, V]{max: max, entries: map[K]V{}}
}

func (t *fakeTable[K, V]) Put(k K, v V) error {
	if _, ok := t.entries[k]; !ok && len(t.entries) >= t.max {
		return fmt.Errorf("update map fake: %w", unix.E2BIG)
	}
	t.entries[k] = v
	return nil
}

func (t *fakeTable[K, V]) Delete(k K) error {
	delete(t.entries, k)
	return nil
}

func (t *fakeTable[K, V]) All() (map[K]V, error) {
	out := make(map[K]V, len(t.entries))
	for k, v := range t.entries {
		out[k] = v
	}
	return out, nil
}
