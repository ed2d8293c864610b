package routes

import (
	"context"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
)

// TestWatchKernel: a watch on the main table of a namespace reports the
// owned routes added and deleted there (by the table and by hand), and
// nothing about foreign routes or our protocol's routes in other tables.
func TestWatchKernel(t *testing.T) {
	nettest.RequirePrivileged(t)
	ns := vpc(t)
	tbl, err := NewNetlinkTable(ns.Name(), 0, ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tbl.Close)
	other, err := NewNetlinkTable(ns.Name(), 200, ProtocolNodenet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)

	ctx, cancel := context.WithCancel(t.Context())
	subscribed := make(chan struct{})
	changes := make(chan RouteChange, 16)
	done := make(chan error, 1)
	go func() {
		done <- tbl.Watch(ctx, func() { close(subscribed) }, func(c RouteChange) { changes <- c })
	}()
	select {
	case <-subscribed:
	case err := <-done:
		t.Fatalf("watch ended before subscribing: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not subscribed after 10s")
	}
	next := func(what string) RouteChange {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case <-time.After(5 * time.Second):
			t.Fatalf("no change reported for %s", what)
			return RouteChange{}
		}
	}

	ns.MustExec(t, "ip", "route", "add", "10.244.9.0/24", "via", "192.168.50.254", "proto", "static") // foreign
	mustOK(t, other.Add(ctx, Route{Dst: pfx("10.244.8.0/24"), Gw: ip("192.168.50.254")}))             // another table
	owned := Route{Dst: pfx("10.244.1.0/24"), Gw: ip("192.168.50.11")}
	mustOK(t, tbl.Add(ctx, owned))
	if c := next("the add"); c.Deleted || !owned.Matches(c.Route) {
		t.Fatalf("add reported as %+v", c)
	}
	ns.MustExec(t, "ip", "-6", "route", "add", "fd00:244:0:1::/64", "via", "fd00:50::11", "proto", "78")
	if c := next("an IPv6 add by hand"); c.Deleted || c.Route.Dst != pfx("fd00:244:0:1::/64") || c.Route.Gw != ip("fd00:50::11") {
		t.Fatalf("IPv6 add reported as %+v", c)
	}
	ns.MustExec(t, "ip", "route", "del", "10.244.1.0/24", "proto", "78")
	if c := next("the delete by hand"); !c.Deleted || !owned.Matches(c.Route) || c.Route.Protocol != ProtocolNodenet || c.Route.Table != MainTable {
		t.Fatalf("delete reported as %+v", c)
	}
	select {
	case c := <-changes:
		t.Fatalf("unexpected change %+v", c)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch returned %v on cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after cancel")
	}
}
