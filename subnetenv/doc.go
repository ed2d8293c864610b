// Package subnetenv reads and writes /run/flannel/subnet.env, the file
// flanneld hands to the CNI plugin: flannel's exact keys, order and value
// formats, so files written by upstream flannel and by nodenet are
// interchangeable.
//
// It is a leaf that flanneld (the writer) and the CNI plugin (the reader)
// both import, so neither sits above the other in the import graph. It
// depends on the standard library (no package net) and internal/atomicfile
// only, because the lean CNI binary links it.
package subnetenv
