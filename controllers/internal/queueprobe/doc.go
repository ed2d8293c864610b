// Package queueprobe lets a controller's tests wait until the controller
// has handled an event, instead of sleeping a fixed time and hoping: a
// negative check ("the controller wrote nothing") is only meaningful once
// the controller has seen the change and decided.
//
// A test wraps the controller's work queue before the informers start.
// Every add (immediate, delayed or rate-limited) and every sync start and
// end is numbered on one clock; a key is handled since a mark when it was
// added after the mark and its last finished sync started after its last
// add. A sync that starts after an add reads informer caches that already
// hold the change behind it (handlers run after the store is updated, and
// they add), so it has acted on everything queued for it.
//
// It is test support: only tests import it.
package queueprobe
