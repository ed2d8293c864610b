// Package workers runs the queue workers every controller shares: take a
// key, sync it, requeue it rate-limited on error, forget it on success.
package workers
