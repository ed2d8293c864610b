// Package periodic runs a function on a fixed interval until a context
// ends: the ticker loop that compaction, resyncs and status reports would
// otherwise each write out again.
package periodic
