// Package validation checks objects before nodenet's API server stores them.
//
// Why this exists: everything stored is read back by controllers and node
// agents that trust it - a bad CIDR in node.spec.podCIDRs or a duplicate
// (port, protocol) in a Service turns into broken routes or iptables/nft
// rules on every node, long after the request that caused it succeeded. The
// only place to refuse such input is the write path, so every create and
// update goes through a function here and nothing that fails is stored.
//
// The rules follow kube-apiserver (k8s.io/kubernetes/pkg/apis/*/validation
// and the parts of the registry strategies that act as validation) for the
// fields that networking components read, so that manifests which work
// against a real cluster work here and vice versa. Errors are
// k8s.io/apimachinery field.Error values with the same paths and types
// upstream uses; the server turns a non-empty list into a 422 Invalid
// Status (apierrors.NewInvalid) whose causes clients such as kubectl
// already know how to print.
//
// Contract with the server:
//
//   - Input is expected to be defaulted (package defaulting) first. Fields
//     that defaulting always fills (service type, port protocols,
//     sessionAffinity, ...) are reported as Required when missing.
//   - Values the server allocates may still be empty/zero at validation time
//     (clusterIP, nodePort, healthCheckNodePort): "not allocated yet" is
//     accepted; anything set must be valid.
//   - *Update functions validate the new object against the stored one and
//     include ValidateObjectMetaUpdate, which requires
//     metadata.resourceVersion to be set. For unconditional updates (a PUT
//     without resourceVersion) the server must copy the stored object's
//     resourceVersion first, as kube-apiserver does.
//   - Status subresources use the *StatusUpdate functions, which validate
//     the status and refuse spec changes; the main resource's update does
//     not stop status changes on its own - like upstream, the server should
//     carry the stored status over on a main-resource update.
//
// The package depends only on k8s.io/api and k8s.io/apimachinery, not on
// k8s.io/kubernetes, so the rules are re-implemented rather than imported;
// comments name the upstream function where the behaviour comes from.
package validation
