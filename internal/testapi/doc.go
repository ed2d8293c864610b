// Package testapi starts a real nodenet API server (embedded etcd in a temp
// dir) for tests of controllers and daemons, and hands out client-go clients
// for it. Everything is stopped in t.Cleanup.
package testapi
