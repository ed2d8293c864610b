// Package allocator chooses free values from a Service IP range or a NodePort
// range. It only picks candidates: whether a value is really free is decided
// by the storage transaction that claims it, so two API servers (or two
// concurrent creates) can never hand out the same value.
package allocator
