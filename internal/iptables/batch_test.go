package iptables

import (
	"context"
	"testing"
)

// TestBatchOrder: whatever the order of calls, each table lists
// declarations, deletions, additions and chain deletions in that order, so
// the kernel accepts a jump to a chain declared later in the program and
// deletes a chain only after the rule referring to it.
func TestBatchOrder(t *testing.T) {
	b := NewBatch()
	if !b.Empty() || len(b.Bytes()) != 0 {
		t.Fatalf("new batch not empty: %q", b.Bytes())
	}
	b.Append("nat", "POSTROUTING", "-j NODENET-A")
	b.Declare("nat", "NODENET-A")
	b.Delete("filter", "FORWARD", "-j NODENET-B")
	b.DeleteChain("filter", "NODENET-B")
	b.Insert("nat", "PREROUTING", "-j NODENET-A")
	b.Append("nat", "NODENET-A", "-j RETURN")
	want := "*nat\n:NODENET-A - [0:0]\n-A POSTROUTING -j NODENET-A\n-I PREROUTING -j NODENET-A\n-A NODENET-A -j RETURN\nCOMMIT\n" +
		"*filter\n:NODENET-B - [0:0]\n-D FORWARD -j NODENET-B\n-X NODENET-B\nCOMMIT\n"
	if got := string(b.Bytes()); got != want {
		t.Fatalf("batch:\n%s\nwant:\n%s", got, want)
	}
	if b.Empty() || b.Added() != 3 {
		t.Fatalf("Empty %v, Added %d, want false, 3", b.Empty(), b.Added())
	}

	// The Fake takes it in one Restore: the filter half fails (no chain
	// NODENET-B to delete), the whole input is rejected.
	f := NewFake()
	if err := f.Restore(context.Background(), b.Bytes()); err == nil {
		t.Fatal("deleting a jump that is not there succeeded")
	}
	if len(f.Rules("nat", "POSTROUTING")) != 0 {
		t.Fatal("a failed restore changed the nat table")
	}
}
