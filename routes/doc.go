// Package routes converges IP routes in a network namespace through
// netlink, for flanneld's host-gw backend and for the cloud route
// controller's "VPC" routing table.
//
// A Table is one kernel routing table as seen by one owner. The owner is a
// routing protocol number (rtm_protocol): the kernel stores it with every
// route and lets it be matched on dump and delete, so marking our routes
// with ProtocolNodenet is what lets List show only routes we created and
// Delete never remove a route an administrator, the kernel or another
// daemon added — even when it sits in the same table, inside the same
// cluster CIDR.
//
// Diff is pure and compares desired routes with the routes a Table lists;
// callers apply the adds before the deletes, because Add replaces an owned
// route to the same destination in place (no window without a route) and
// the delete of the superseded route then finds nothing (ErrNotFound).
//
// NetlinkTable talks to the kernel; its Watch reports changes to the
// routes it owns, made by anyone, through a netlink route subscription.
// Fake is a stateful in-memory Table that reproduces the kernel's
// EEXIST/ESRCH behaviour. The same contract test runs against both
// (contract_test.go), which is what makes the fake trustworthy for
// controller tests; Watch is kernel-only and tested there
// (watch_linux_test.go).
package routes
