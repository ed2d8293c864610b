// Package defaulting fills in the fields that kube-apiserver would fill in
// before an object is validated and stored.
//
// Why this exists: nodenet's API server stores the typed k8s.io/api objects
// as they arrive, but the components that read them (kube-proxy style
// service programming, CNI plugins, endpoint controllers, kubelet-like
// agents) are written against objects that went through kube-apiserver,
// where defaulting has already happened. A Service without spec.type, a
// port without a protocol or an EndpointSlice port with a nil protocol is
// legal on the wire but every consumer would have to re-implement the
// defaults, and would eventually disagree about them. Defaulting here, once,
// keeps stored objects identical to what a real cluster would hold.
//
// The functions mirror k8s.io/kubernetes/pkg/apis/core/v1/defaults.go (the
// SetDefaults_* functions), the parts of the registry strategies that act
// like defaults (status.phase on create, the namespace finalizer, the
// clusterIP/clusterIPs and podIP/podIPs pairing that conversion performs)
// and the DefaultTolerationSeconds admission plugin. They only ever fill
// in empty fields (the one exception, like upstream, is that
// sessionAffinityConfig is dropped when sessionAffinity is None) so they
// are idempotent and safe to call on every create and update.
//
// Call order expected by package validation: decode, default, validate,
// store. Validation assumes defaulted input (e.g. it reports a missing
// port protocol as Required rather than assuming TCP).
package defaulting
