// Package endpointslice is the EndpointSlice controller: for every Service
// with a selector it keeps a set of discovery.k8s.io/v1 EndpointSlices that
// list the Service's matching pods, one slice set per IP family and per
// resolved port set, at most Options.MaxEndpointsPerSlice endpoints a slice.
//
// It owns only slices labelled
// endpointslice.kubernetes.io/managed-by=endpointslice-controller.nodenet.io;
// slices written by users or other controllers (for selector-less Services,
// say) are never touched.
//
// Every watcher of EndpointSlices (each node's proxy) pays for every write,
// so the controller works hard not to write: a sync computes the desired
// endpoints, keeps every slice whose content is unchanged, rewrites only the
// slices whose endpoints changed (filling them before creating new ones),
// and never sends a slice equal to what is stored. All state is rebuilt from
// the API on start; a restarted controller writes nothing if nothing
// changed.
//
// The bundled API server has no garbage collector, so a Service's slices
// are deleted by this controller when the Service goes away or loses its
// selector, not by ownerReferences alone.
package endpointslice
