// Package storage keeps Kubernetes objects in etcd: one key per object,
// resourceVersion = the key's etcd mod revision, optimistic concurrency by
// comparing that revision inside a transaction, and a watch cache per resource
// that feeds every client watch (and resourceVersion=0 lists) from a single
// etcd watch.
//
// Extra keys (allocation records such as a Service's ClusterIP) can ride in
// the same transaction as the object, so an allocation exists exactly when the
// object that owns it does — there is nothing to repair after a crash.
package storage
