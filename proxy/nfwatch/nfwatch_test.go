package nfwatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
)

// TestWatch in a throwaway namespace: creating things is not announced,
// deleting a rule, flushing a chain and deleting a set element or the
// table of a watched table is; the same deletions in another table, or
// in the watched table's name under the other family, are not.
func TestWatch(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	ns := nettest.New(t)
	setup := func(fam, table string) {
		ns.MustExec(t, "nft", "add table "+fam+" "+table+
			" ; add chain "+fam+" "+table+" c"+
			" ; add rule "+fam+" "+table+" c counter"+
			" ; add set "+fam+" "+table+" s { type inet_service ; }"+
			" ; add element "+fam+" "+table+" s { 80 }")
	}
	w, err := Open(ns.Name(), Tables(proxy.IPv4, "watched")...)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx, func() { seen.Add(1) }) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	defer stop()

	// Notifications arrive asynchronously; quiet waits for stragglers.
	quiet := func(what string) {
		t.Helper()
		time.Sleep(200 * time.Millisecond)
		if n := seen.Swap(0); n != 0 {
			t.Errorf("%s: %d announcements, want none", what, n)
		}
	}
	announced := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Second); seen.Load() == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not announced", what)
			}
		}
		time.Sleep(100 * time.Millisecond)
		seen.Store(0)
	}

	setup("ip", "watched")
	setup("ip", "other")
	setup("ip6", "watched")
	quiet("creating tables")
	for _, d := range []struct{ what, cmd string }{
		{"set element deleted", "delete element ip watched s { 80 }"},
		{"chain flushed", "flush chain ip watched c"},
		{"table deleted", "delete table ip watched"},
	} {
		ns.MustExec(t, "nft", "delete element ip other s { 80 } ; flush chain ip other c ; delete table ip6 watched")
		quiet("deletions elsewhere")
		ns.MustExec(t, "nft", d.cmd)
		announced(d.what)
		ns.MustExec(t, "nft", "delete table ip other")
		setup("ip", "other")
		setup("ip6", "watched")
		if d.what != "table deleted" {
			ns.MustExec(t, "nft", "delete table ip watched")
			setup("ip", "watched")
		}
		time.Sleep(200 * time.Millisecond) // the reset's own announcements
		seen.Store(0)
	}
	stop()
}
