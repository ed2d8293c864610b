// Package subnetenv reads and writes /run/flannel/subnet.env, the file
// flanneld hands to the CNI plugin: flannel's exact keys, order and value
// formats, so files written by upstream flannel and by nodenet are
// interchangeable. It is a leaf package (standard library only) because the
// lean CNI binary links it.
package subnetenv
