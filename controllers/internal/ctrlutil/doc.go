// Package ctrlutil holds the constructor preamble the controllers share:
// their work queue, handler registration, the stand-in for a missing event
// recorder, and the pod-by-node index.
package ctrlutil
